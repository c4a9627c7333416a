//! Each reader on a small fixture: exact job fields, then the canonical CSV of the result
//! against a checked-in golden file (`tests/data/expected/`, re-bless with `TESSERA_BLESS=1`).

use tessera_model::{Bytes, MilliCpu, SimDuration, SimTime, TrainingJob};
use tessera_trace::{read_trace, ReadOptions, TraceFormat, TraceStats};

use crate::common::{assert_golden, catalog, data_path};

fn read_fixture(name: &str, format: Option<TraceFormat>) -> tessera_trace::LoadedTrace {
    let path = data_path(name);
    read_trace(&path, format, &catalog(), &ReadOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

fn secs(s: u64) -> SimDuration {
    SimDuration::from_secs(s)
}

#[test]
fn tessera_fixture() {
    let t = read_fixture("tessera_small.csv", None);
    assert_eq!(
        (t.format, t.detected, t.skipped),
        (TraceFormat::Tessera, true, 0)
    );
    assert_eq!(t.lines, [3, 5, 2, 4]);
    let c = catalog();
    let jobs = t.workload.jobs();
    let names: Vec<&str> = jobs.iter().map(|j| &*j.name).collect();
    assert_eq!(names, ["train-a", "d", "train-b", "train, c"]);

    let mut a = TrainingJob::simple(0, SimTime::ZERO, 1, SimDuration::from_micros(59_500_000));
    a.name = "train-a".into();
    assert_eq!(a.iterations, 60);
    assert_eq!(jobs[0], a);

    assert_eq!(jobs[1].submit, SimTime::from_micros(30_000_001));
    assert_eq!(
        (jobs[1].gpus, jobs[1].duration, jobs[1].iterations),
        (2, secs(1), 7)
    );
    assert_eq!(
        (jobs[1].model.as_str(), jobs[1].tenant.as_str()),
        ("bert", "team-a")
    );
    assert_eq!(jobs[1].batch_size, None);

    let b = &jobs[2];
    assert_eq!(
        (b.submit, b.gpus, b.duration, b.iterations),
        (SimTime::from_secs(120), 4, secs(3600), 1000)
    );
    assert_eq!(
        (
            b.model.as_str(),
            b.batch_size,
            b.tenant.as_str(),
            b.priority
        ),
        ("resnet50", Some(256), "team-a", 2)
    );
    assert_eq!(
        b.gpu_types,
        vec![c.find("V100-32GB").unwrap(), c.find("A100-40GB").unwrap()]
    );
    assert_eq!(
        (b.cpu, b.memory),
        (Some(MilliCpu(16_000)), Some(Bytes::from_gib(64)))
    );

    let d = &jobs[3];
    assert_eq!(d.duration, SimDuration::from_micros(7_200_250_000));
    assert_eq!(
        (d.priority, d.cpu, d.memory),
        (-1, Some(MilliCpu(500)), Some(Bytes(512 << 20)))
    );
    assert_eq!(d.gpu_types, vec![c.find("A100-80GB").unwrap()]);
    assert!(jobs.iter().enumerate().all(|(i, j)| j.id.index() == i));
    assert_golden("tessera_small", &t.workload);
}

#[test]
fn tiresias_fixture() {
    let t = read_fixture("tiresias_small.csv", None);
    assert_eq!((t.format, t.detected), (TraceFormat::Tiresias, true));
    assert_eq!(t.lines, [2, 3, 5, 4]);
    let j = &t.workload.jobs()[2];
    assert_eq!(&*j.name, "2");
    assert_eq!(
        (j.submit, j.gpus, j.iterations, j.duration),
        (SimTime::from_secs(53), 2, 157, secs(127))
    );
    assert_eq!(j.model, "inception4");
    assert_golden("tiresias_small", &t.workload);
}

#[test]
fn tiresias_builtin_60_jobs() {
    let w = tessera_trace::builtin_trace("tiresias-60", 7).unwrap();
    assert_eq!(w.len(), 60);
    let s = TraceStats::of(&w);
    assert_eq!(s.models, 10);
    assert_eq!(w.jobs()[0].model, "vgg19");
    assert_eq!(w.jobs()[1].gpus, 8);
    assert_golden("tiresias_60", &w);
}

#[test]
fn pollux_philly_fixture() {
    let t = read_fixture("pollux_philly_small.csv", None);
    assert_eq!((t.format, t.detected), (TraceFormat::PolluxPhilly, true));
    // Sorted by submit; equal times (rows 3 and 5) keep file order.
    assert_eq!(t.lines, [4, 3, 5, 2]);
    let jobs = t.workload.jobs();
    let submits: Vec<u64> = jobs
        .iter()
        .map(|j| j.submit.as_micros() / 1_000_000)
        .collect();
    assert_eq!(submits, [0, 190_884, 190_884, 193_816]);
    assert_eq!(
        (jobs[0].gpus, jobs[0].duration, jobs[0].tenant.as_str()),
        (8, secs(193_256), "ee9e8c")
    );
    assert_eq!(
        (jobs[2].gpus, jobs[2].duration, &*jobs[2].name),
        (4, secs(30), "3")
    );
    assert_eq!(jobs[3].iterations, 66);
    assert_golden("pollux_philly_small", &t.workload);
}

#[test]
fn gavel_real_trace() {
    let t = read_fixture("gavel_51b7ef.trace", None);
    assert_eq!(
        (t.format, t.detected, t.skipped),
        (TraceFormat::Gavel, true, 0)
    );
    assert_eq!(t.workload.len(), 18);
    let s = TraceStats::of(&t.workload);
    assert_eq!(s.gpu_histogram, vec![(1, 3), (4, 2), (8, 13)]);
    assert_eq!(s.models, 6);
    let first = &t.workload.jobs()[0];
    assert_eq!(
        (first.model.as_str(), first.batch_size, first.gpus),
        ("transformer", Some(128), 1)
    );
    assert_eq!(first.iterations, 246_378);
    let expect = 246_378.0 / 5.44610521981264;
    assert!(
        (first.duration.as_secs_f64() - expect).abs() < 1e-5,
        "{}",
        first.duration
    );
    let last = t.workload.jobs().last().unwrap();
    assert_eq!(last.submit, SimTime::from_secs(3_022_240));
    assert!((last.duration.as_secs_f64() - 272_001.0 / 81.5065873273903).abs() < 1e-5);
    assert_golden("gavel_51b7ef", &t.workload);
}

#[test]
fn pollux_fixture() {
    let t = read_fixture("pollux_small.csv", None);
    assert_eq!((t.format, t.detected), (TraceFormat::Pollux, true));
    let names: Vec<&str> = t.workload.jobs().iter().map(|j| &*j.name).collect();
    assert_eq!(
        names,
        [
            "bert-3",
            "cifar10-0",
            "deepspeech2-1",
            "ncf-2",
            "imagenet-4",
            "yolov3-5"
        ]
    );
    let c = &t.workload.jobs()[1];
    assert_eq!(
        (c.model.as_str(), c.gpus, c.batch_size, c.iterations),
        ("cifar10", 6, Some(2048), 2442)
    );
    // Local batch ceil(2048 / 6) = 342, between the profiled 257 and 363.
    let step = 0.18708271980285646 + (0.2595393657684326 - 0.18708271980285646) * 85.0 / 106.0;
    assert!(
        (c.duration.as_secs_f64() - 2442.0 * step).abs() < 1e-5,
        "{}",
        c.duration
    );
    assert_golden("pollux_small", &t.workload);
}

#[test]
fn given_format_is_not_marked_detected() {
    let t = read_fixture("tiresias_small.csv", Some(TraceFormat::Tiresias));
    assert!(!t.detected);
}

#[test]
fn philly_json_fixture() {
    let t = read_fixture("philly_small.json", None);
    assert_eq!(
        (t.format, t.detected, t.skipped, t.dropped),
        (TraceFormat::PhillyJson, true, 0, 4)
    );
    // Sorted by submit time; each job's line is where its object starts.
    assert_eq!(t.lines, [26, 2, 40]);
    let jobs = t.workload.jobs();
    let got: Vec<(&str, u64, u32, SimDuration, &str)> = jobs
        .iter()
        .map(|j| {
            (
                &*j.name,
                j.submit.as_micros() / 1_000_000,
                j.gpus,
                j.duration,
                j.tenant.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            // One attempt of an hour on one GPU.
            (
                "application_1506638472019_10000",
                0,
                1,
                secs(3600),
                "11cb48"
            ),
            // Attempts of 74 s and 60 s summed; the GPUs of the last attempt (2 + 2).
            (
                "application_1506638472019_14199",
                699,
                4,
                secs(134),
                "ee9e8c"
            ),
            // The attempt without a start time counts nothing; the last has 2 GPUs.
            (
                "application_1506638472019_10001",
                7140,
                2,
                secs(30),
                "11cb48"
            ),
        ]
    );
    assert_eq!(jobs[1].iterations, 134);
    assert_golden("philly_small", &t.workload);
}

#[test]
fn helios_fixture() {
    let t = read_fixture("helios_small.csv", None);
    assert_eq!(
        (t.format, t.detected, t.skipped, t.dropped),
        (TraceFormat::Helios, true, 0, 2),
        "h2 (CPU only) and h4 (never ran) are dropped"
    );
    let jobs = t.workload.jobs();
    let names: Vec<&str> = jobs.iter().map(|j| &*j.name).collect();
    // Sorted by submit time; times relative to the earliest kept job (h5 at 00:00:00).
    assert_eq!(names, ["h5", "h1", "h3"]);
    assert_eq!(t.lines, [6, 2, 4]);
    let h5 = &jobs[0];
    assert_eq!(
        (h5.submit, h5.gpus, h5.duration, h5.tenant.as_str()),
        (
            SimTime::ZERO,
            1,
            SimDuration::from_micros(120_500_000),
            "vcC"
        )
    );
    assert_eq!(h5.cpu, Some(MilliCpu::from_cores(4)));
    assert_eq!(h5.memory, None);
    let h3 = &jobs[2];
    assert_eq!(
        (h3.submit, h3.gpus, h3.duration, h3.cpu),
        (
            SimTime::from_secs(120),
            16,
            secs(30),
            Some(MilliCpu::from_cores(96))
        )
    );
    assert_golden("helios_small", &t.workload);
}

#[test]
fn acme_fixture() {
    let t = read_fixture("acme_small.csv", None);
    assert_eq!(
        (t.format, t.detected, t.skipped, t.dropped),
        (TraceFormat::Acme, true, 0, 1),
        "a2 (CPU only) is dropped"
    );
    let jobs = t.workload.jobs();
    let names: Vec<&str> = jobs.iter().map(|j| &*j.name).collect();
    // Offsets: a1 is 00:00:30 UTC, a3 00:00:00 UTC, a4 01:00:00 UTC.
    assert_eq!(names, ["a3", "a1", "a4"]);
    let a1 = &jobs[1];
    assert_eq!(
        (a1.submit, a1.gpus, a1.duration, a1.tenant.as_str()),
        (SimTime::from_secs(30), 16, secs(7200), "u1")
    );
    assert_eq!(a1.cpu, Some(MilliCpu::from_cores(128)));
    // 800 GB per pod, two pods.
    assert_eq!(a1.memory, Some(Bytes(1_600_000_000_000)));
    let a4 = &jobs[2];
    assert_eq!(
        (a4.submit, a4.cpu, a4.memory),
        (SimTime::from_secs(3600), None, None)
    );
    assert_golden("acme_small", &t.workload);
}
