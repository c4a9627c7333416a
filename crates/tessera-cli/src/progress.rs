//! Progress bars on stderr: shown only on a terminal, and only once a run has taken a second.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tessera_model::SimTime;

/// Set by `tessera sweep`, which draws one bar for the whole sweep instead of one per run.
static RUN_BARS_HIDDEN: AtomicBool = AtomicBool::new(false);

/// Hides the per-run bars of every later [`Bars`] in this process.
pub fn hide_run_bars() {
    RUN_BARS_HIDDEN.store(true, Ordering::Relaxed);
}

/// A set of bars, one per concurrent run; hidden until the first second has passed.
#[derive(Clone)]
pub struct Bars {
    multi: MultiProgress,
    started: Instant,
    shown: Arc<AtomicBool>,
    enabled: bool,
}

impl Bars {
    pub fn new() -> Bars {
        Bars {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::hidden()),
            started: Instant::now(),
            shown: Arc::new(AtomicBool::new(false)),
            enabled: std::io::stderr().is_terminal() && !RUN_BARS_HIDDEN.load(Ordering::Relaxed),
        }
    }

    pub fn bar(&self, label: &str, total: usize) -> RunBar {
        let bar = self.multi.add(ProgressBar::new(total as u64));
        if let Ok(style) =
            ProgressStyle::with_template("{prefix:>14} [{bar:30}] {pos}/{len} jobs  {msg}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(label.to_string());
        RunBar {
            bar,
            bars: self.clone(),
        }
    }

    fn maybe_show(&self) {
        if self.enabled
            && !self.shown.load(Ordering::Relaxed)
            && self.started.elapsed() > Duration::from_secs(1)
            && !self.shown.swap(true, Ordering::Relaxed)
        {
            self.multi.set_draw_target(ProgressDrawTarget::stderr());
        }
    }
}

/// One run's bar; the simulator's progress callback.
pub struct RunBar {
    bar: ProgressBar,
    bars: Bars,
}

impl RunBar {
    /// Counts finished runs of an experiment (`done` of `total`); callable from any thread.
    pub fn set(&self, done: usize, total: usize) {
        self.bar.set_length(total as u64);
        self.bar.set_position(done as u64);
        self.bars.maybe_show();
    }
}

impl tessera_sim::Progress for RunBar {
    fn update(&mut self, done: usize, _total: usize, now: SimTime) {
        self.bar.set_position(done as u64);
        self.bar
            .set_message(format!("simulated {:.1} h", now.as_secs_f64() / 3600.0));
        self.bars.maybe_show();
    }
}

impl Drop for RunBar {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
