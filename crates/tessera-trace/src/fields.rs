//! Shared reading machinery: CSV/TSV records with line numbers, header lookup by column name,
//! and checked field parsers. Every reader goes through here, so every reader checks values the
//! same way and reports errors with the same `file:line: field F: reason` shape.

use tessera_model::{
    Bytes, GpuCatalog, GpuModelId, MilliCpu, QuantityError, SimDuration, SimTime, TrainingJob,
    MAX_INPUT_SECS,
};

use crate::error::{TraceError, TraceErrorKind as K};
use crate::ReadOptions;

/// Largest GPU count a job may request.
pub(crate) const MAX_GPUS: u64 = 1_000_000;

const MICROS_PER_SEC: u64 = 1_000_000;

/// What every reader needs: the source name for messages, the catalog and the options.
pub(crate) struct Ctx<'a> {
    pub(crate) source: &'a str,
    pub(crate) catalog: &'a GpuCatalog,
    pub(crate) opts: &'a ReadOptions,
}

/// How a format's records are laid out.
pub(crate) struct Layout<'a> {
    /// Field separator.
    pub(crate) delimiter: u8,
    /// Whether `"` quotes fields.
    pub(crate) quoting: bool,
    /// `None`: the first record is a header naming the columns. `Some(names)`: no header; the
    /// fields are positional with these names.
    pub(crate) positional: Option<&'a [&'a str]>,
    /// Columns that must be present (header formats).
    pub(crate) required: &'a [&'a str],
}

impl<'a> Layout<'a> {
    /// A comma-separated file with a header row naming at least `required`.
    pub(crate) const fn csv_with_header(required: &'a [&'a str]) -> Layout<'a> {
        Layout {
            delimiter: b',',
            quoting: true,
            positional: None,
            required,
        }
    }
}

/// Column names and where they are.
pub(crate) struct Header {
    names: Vec<String>,
}

impl Header {
    fn new(names: impl IntoIterator<Item = String>) -> Header {
        Header {
            names: names
                .into_iter()
                .map(|n| {
                    n.trim()
                        .trim_start_matches('\u{feff}')
                        .trim()
                        .to_ascii_lowercase()
                })
                .collect(),
        }
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }
}

/// One data row: fields looked up by column name, parsed with checks.
pub(crate) struct Row<'a> {
    ctx: &'a Ctx<'a>,
    header: &'a Header,
    record: &'a csv::StringRecord,
    /// 1-based line where the row starts.
    pub(crate) line: u64,
    /// 0-based position of the row among data rows.
    pub(crate) index: usize,
}

/// How many skipped rows' errors are kept to show the user (`--skip-invalid`).
pub(crate) const SKIPPED_EXAMPLES: usize = 5;

/// Jobs read so far, each with its source line, and the count of skipped rows.
pub(crate) struct Parsed {
    pub(crate) jobs: Vec<(TrainingJob, u64)>,
    pub(crate) skipped: usize,
    /// The errors of the first [`SKIPPED_EXAMPLES`] skipped rows.
    pub(crate) skipped_examples: Vec<TraceError>,
    /// Well-formed jobs the format says cannot be replayed (see [`crate::LoadedTrace::dropped`]).
    pub(crate) dropped: usize,
}

/// Reads every record of `text` in `layout`, turning each data row into a job with `make`.
///
/// A bad row fails the read, or is counted and skipped under `skip_invalid`. Problems with the
/// file as a whole (no header, a missing required column) always fail.
pub(crate) fn read_rows(
    ctx: &Ctx<'_>,
    text: &str,
    layout: &Layout<'_>,
    mut make: impl FnMut(&Row<'_>) -> Result<TrainingJob, TraceError>,
) -> Result<Parsed, TraceError> {
    read_rows_dropping(ctx, text, layout, |row| make(row).map(Some))
}

impl Parsed {
    /// Counts a skipped row, keeping the first few errors to show.
    pub(crate) fn skip(&mut self, e: TraceError) {
        self.skipped += 1;
        if self.skipped_examples.len() < SKIPPED_EXAMPLES {
            self.skipped_examples.push(e);
        }
    }
}

/// Like [`read_rows`], but `make` may return `Ok(None)` for a well-formed row the format says
/// cannot be replayed (a CPU-only job, a job that never ran); such rows are counted in
/// [`Parsed::dropped`].
pub(crate) fn read_rows_dropping(
    ctx: &Ctx<'_>,
    text: &str,
    layout: &Layout<'_>,
    mut make: impl FnMut(&Row<'_>) -> Result<Option<TrainingJob>, TraceError>,
) -> Result<Parsed, TraceError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(layout.delimiter)
        .quoting(layout.quoting)
        .from_reader(text.as_bytes());
    let mut records = reader.records();
    let header = match layout.positional {
        Some(names) => Header::new(names.iter().map(|n| n.to_string())),
        None => read_header(ctx, &mut records, layout.required)?,
    };
    let mut parsed = Parsed {
        jobs: Vec::new(),
        skipped: 0,
        skipped_examples: Vec::new(),
        dropped: 0,
    };
    let columns = header.names.len();
    for (index, result) in records.enumerate() {
        let outcome = match result {
            Ok(record) => {
                let line = record_line(&record);
                let row = Row {
                    ctx,
                    header: &header,
                    record: &record,
                    line,
                    index,
                };
                // A row longer than its header is shifted or corrupt: its values cannot be
                // trusted to sit under the right columns. (Positional formats have no header
                // to compare with.)
                if layout.positional.is_none() && record.len() > columns {
                    Err(TraceError::at(
                        ctx.source,
                        line,
                        None,
                        K::ExtraFields {
                            got: record.len(),
                            want: columns,
                        },
                    ))
                } else {
                    make(&row).map(|job| job.map(|j| (j, line)))
                }
            }
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line());
                Err(TraceError::at(
                    ctx.source,
                    line,
                    None,
                    K::Invalid(e.to_string()),
                ))
            }
        };
        match outcome {
            Ok(Some(pair)) => parsed.jobs.push(pair),
            Ok(None) => parsed.dropped += 1,
            Err(e) if ctx.opts.skip_invalid => parsed.skip(e),
            Err(e) => return Err(e),
        }
    }
    Ok(parsed)
}

fn record_line(record: &csv::StringRecord) -> u64 {
    record.position().map_or(0, |p| p.line())
}

fn read_header(
    ctx: &Ctx<'_>,
    records: &mut csv::StringRecordsIter<'_, &[u8]>,
    required: &[&str],
) -> Result<Header, TraceError> {
    let record = match records.next() {
        None => return Err(TraceError::whole(ctx.source, K::Empty("no header row"))),
        Some(Err(e)) => {
            let line = e.position().map_or(1, |p| p.line());
            return Err(TraceError::at(
                ctx.source,
                line,
                None,
                K::Invalid(e.to_string()),
            ));
        }
        Some(Ok(r)) => r,
    };
    let line = record_line(&record);
    let header = Header::new(record.iter().map(str::to_string));
    for (i, name) in header.names.iter().enumerate() {
        if !name.is_empty() && header.names[..i].contains(name) {
            return Err(TraceError::at(
                ctx.source,
                line,
                Some(name),
                K::DuplicateColumn(name.clone()),
            ));
        }
    }
    if let Some(missing) = required.iter().find(|c| header.index(c).is_none()) {
        let have = header.names.join(",");
        let have: String = have.chars().take(200).collect();
        return Err(TraceError::at(
            ctx.source,
            line,
            Some(missing),
            K::MissingColumn(have),
        ));
    }
    Ok(header)
}

impl Row<'_> {
    /// An error about `field` of this row.
    pub(crate) fn err(&self, field: &str, kind: K) -> TraceError {
        TraceError::at(self.ctx.source, self.line, Some(field), kind)
    }

    /// The catalog readers resolve GPU names through.
    pub(crate) fn catalog(&self) -> &GpuCatalog {
        self.ctx.catalog
    }

    /// The trimmed value of a column; `None` when the column is absent from the header.
    fn raw(&self, name: &str) -> Result<Option<&str>, TraceError> {
        let Some(i) = self.header.index(name) else {
            return Ok(None);
        };
        let Some(value) = self.record.get(i) else {
            let want = i + 1;
            return Err(self.err(
                name,
                K::MissingField {
                    got: self.record.len(),
                    want,
                },
            ));
        };
        // Invalid bytes were replaced when the file was decoded (see `decode`).
        if value.contains('\u{fffd}') {
            return Err(self.err(name, K::NotUtf8));
        }
        Ok(Some(value.trim()))
    }

    /// A column the header must have (it was checked), possibly empty.
    pub(crate) fn text(&self, name: &str) -> Result<&str, TraceError> {
        Ok(self.raw(name)?.unwrap_or(""))
    }

    /// A column that must have a non-empty value.
    pub(crate) fn nonempty(&self, name: &str) -> Result<&str, TraceError> {
        match self.raw(name)? {
            Some(v) if !v.is_empty() => Ok(v),
            _ => Err(self.err(name, K::EmptyValue)),
        }
    }

    /// An optional column: `None` when absent or empty.
    pub(crate) fn opt(&self, name: &str) -> Result<Option<&str>, TraceError> {
        Ok(self.raw(name)?.filter(|v| !v.is_empty()))
    }

    /// A non-negative time in seconds, as an instant.
    pub(crate) fn time(&self, name: &str) -> Result<SimTime, TraceError> {
        parse_micros(self.nonempty(name)?)
            .map(SimTime::from_micros)
            .map_err(|k| self.err(name, k))
    }

    /// A positive span in seconds.
    pub(crate) fn duration(&self, name: &str) -> Result<SimDuration, TraceError> {
        let value = self.nonempty(name)?;
        let us = parse_micros(value).map_err(|k| self.err(name, k))?;
        positive_duration(us, value).map_err(|k| self.err(name, k))
    }

    /// A GPU count: a whole number in 1..=1,000,000.
    pub(crate) fn gpus(&self, name: &str) -> Result<u32, TraceError> {
        let value = self.nonempty(name)?;
        let n = parse_count(value).map_err(|k| self.err(name, k))?;
        check_gpus(n, value).map_err(|k| self.err(name, k))
    }

    /// A positive whole number (iterations, steps).
    pub(crate) fn count(&self, name: &str) -> Result<u64, TraceError> {
        let value = self.nonempty(name)?;
        match parse_count(value) {
            Ok(0) => Err(self.err(name, K::NotPositive(value.to_string()))),
            Ok(n) => Ok(n),
            Err(k) => Err(self.err(name, k)),
        }
    }

    /// An optional positive whole number that fits in `u32` (batch sizes).
    pub(crate) fn opt_u32(&self, name: &str) -> Result<Option<u32>, TraceError> {
        let Some(value) = self.opt(name)? else {
            return Ok(None);
        };
        match parse_count(value) {
            Ok(0) => Err(self.err(name, K::NotPositive(value.to_string()))),
            Ok(n) => u32::try_from(n)
                .map(Some)
                .map_err(|_| self.err(name, K::OutOfRange(value.to_string()))),
            Err(k) => Err(self.err(name, k)),
        }
    }

    /// An optional signed integer (priorities); empty is `default`.
    pub(crate) fn opt_i32(&self, name: &str, default: i32) -> Result<i32, TraceError> {
        let Some(value) = self.opt(name)? else {
            return Ok(default);
        };
        value
            .parse::<i32>()
            .map_err(|_| match value.parse::<f64>() {
                Ok(x) if !x.is_finite() => self.err(name, K::NotFinite(value.to_string())),
                Ok(_) => self.err(name, K::OutOfRange(value.to_string())),
                Err(_) => self.err(name, K::NotANumber(value.to_string())),
            })
    }

    /// Optional CPU as a Kubernetes quantity (`2`, `500m`); empty = `None`.
    pub(crate) fn opt_cpu(&self, name: &str) -> Result<Option<MilliCpu>, TraceError> {
        let Some(value) = self.opt(name)? else {
            return Ok(None);
        };
        // Plain whole cores and millicores are converted exactly (the general parser goes
        // through f64, which rounds above 2^53).
        let exact = match value.strip_suffix('m') {
            Some(milli) => plain_integer(milli),
            None => plain_integer(value).and_then(|cores| cores.checked_mul(1000)),
        };
        match exact {
            Some(m) => Ok(Some(MilliCpu(m))),
            None => value
                .parse()
                .map(Some)
                .map_err(|e: QuantityError| self.err(name, K::BadQuantity(e.to_string()))),
        }
    }

    /// Optional memory as a Kubernetes quantity (`16Gi`, `512M`); empty = `None`.
    pub(crate) fn opt_memory(&self, name: &str) -> Result<Option<Bytes>, TraceError> {
        let Some(value) = self.opt(name)? else {
            return Ok(None);
        };
        match plain_integer(value) {
            Some(b) => Ok(Some(Bytes(b))),
            None => value
                .parse()
                .map(Some)
                .map_err(|e: QuantityError| self.err(name, K::BadQuantity(e.to_string()))),
        }
    }

    /// GPU model names separated by `|`, resolved through the catalog; empty = any.
    pub(crate) fn gpu_types(&self, name: &str) -> Result<Vec<GpuModelId>, TraceError> {
        let Some(value) = self.opt(name)? else {
            return Ok(Vec::new());
        };
        let mut ids = Vec::new();
        for part in value.split('|').map(str::trim).filter(|p| !p.is_empty()) {
            let id = self.catalog().find(part).ok_or_else(|| {
                let known: Vec<&str> = self
                    .catalog()
                    .models()
                    .iter()
                    .map(|g| g.name.as_str())
                    .collect();
                self.err(
                    name,
                    K::UnknownGpuType {
                        name: part.to_string(),
                        known: known.join(", "),
                    },
                )
            })?;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        Ok(ids)
    }
}

/// A string of ASCII digits as an integer (`None` for anything else or on overflow).
fn plain_integer(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

/// A finite number (`NaN` and infinities rejected).
pub(crate) fn parse_number(value: &str) -> Result<f64, K> {
    let value = value.trim();
    if value.is_empty() {
        return Err(K::EmptyValue);
    }
    match value.parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        Ok(_) => Err(K::NotFinite(value.to_string())),
        Err(_) => Err(K::NotANumber(value.to_string())),
    }
}

/// A non-negative whole number; integral decimals such as `8.0` are accepted.
pub(crate) fn parse_count(value: &str) -> Result<u64, K> {
    let value = value.trim();
    if let Ok(n) = value.parse::<u64>() {
        return Ok(n);
    }
    let x = parse_number(value)?;
    if x < 0.0 {
        return Err(K::Negative(value.to_string()));
    }
    if x.fract() != 0.0 {
        return Err(K::Invalid(format!("must be a whole number, got {value}")));
    }
    if x >= u64::MAX as f64 {
        return Err(K::OutOfRange(value.to_string()));
    }
    Ok(x as u64)
}

/// Non-negative seconds as whole microseconds. Plain decimals are converted exactly (so that
/// what the writer prints reads back bit for bit); other forms (`1e3`) go through `f64` and are
/// rounded to the nearest microsecond.
pub(crate) fn parse_micros(value: &str) -> Result<u64, K> {
    let value = value.trim();
    if value.is_empty() {
        return Err(K::EmptyValue);
    }
    let unsigned = value.strip_prefix('+').unwrap_or(value);
    let limit = MAX_INPUT_SECS * MICROS_PER_SEC;
    if let Some(us) = exact_decimal_micros(unsigned) {
        return match us {
            Some(us) if us <= limit => Ok(us),
            _ => Err(K::TimeTooLarge(value.to_string())),
        };
    }
    let secs = parse_number(value)?;
    if secs < 0.0 {
        return Err(K::Negative(value.to_string()));
    }
    let us = (secs * MICROS_PER_SEC as f64).round();
    if us > limit as f64 {
        return Err(K::TimeTooLarge(value.to_string()));
    }
    Ok(us as u64)
}

/// `Some(Some(us))` for `digits[.digits]`, `Some(None)` when such a value overflows, `None`
/// when the text is not a plain decimal. Digits past the sixth decimal round half up.
fn exact_decimal_micros(text: &str) -> Option<Option<u64>> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        return None;
    }
    let whole: u64 = if int.is_empty() {
        0
    } else {
        match int.parse::<u64>() {
            Ok(n) => n,
            Err(_) => return Some(None),
        }
    };
    let mut micros: u64 = 0;
    let mut taken = 0;
    for b in frac.bytes().take(6) {
        micros = micros * 10 + u64::from(b - b'0');
        taken += 1;
    }
    for _ in taken..6 {
        micros *= 10;
    }
    let round_up = frac.as_bytes().get(6).is_some_and(|b| *b >= b'5');
    Some(
        whole
            .checked_mul(MICROS_PER_SEC)
            .and_then(|w| w.checked_add(micros))
            .and_then(|t| t.checked_add(u64::from(round_up))),
    )
}

/// Rejects zero-length spans.
pub(crate) fn positive_duration(us: u64, value: &str) -> Result<SimDuration, K> {
    if us == 0 {
        Err(K::NotPositive(value.to_string()))
    } else {
        Ok(SimDuration::from_micros(us))
    }
}

/// Checks a GPU count against 1..=MAX_GPUS.
pub(crate) fn check_gpus(n: u64, value: &str) -> Result<u32, K> {
    match n {
        0 => Err(K::NotPositive(value.to_string())),
        n if n > MAX_GPUS => Err(K::TooManyGpus(value.to_string())),
        n => Ok(n as u32),
    }
}

/// Iterations for a job that states none: one per second of its run time, at least one.
pub(crate) fn default_iterations(duration: SimDuration) -> u64 {
    let us = duration.as_micros();
    us.div_ceil(MICROS_PER_SEC).max(1)
}

/// Seconds from a positive, finite `f64` that the caller computed (not read): at least 1 µs,
/// and an error past [`MAX_INPUT_SECS`] (a step count of 2^64 - 1 must not saturate).
pub(crate) fn computed_duration(secs: f64) -> Result<SimDuration, K> {
    if !(secs.is_finite() && secs <= MAX_INPUT_SECS as f64) {
        return Err(K::TimeTooLarge(format!("{secs:.0}")));
    }
    let d = SimDuration::from_secs_f64_ceil(secs);
    Ok(if d.is_zero() {
        SimDuration::from_micros(1)
    } else {
        d
    })
}

/// Decodes file bytes. Invalid UTF-8 sequences become U+FFFD, which field access then reports
/// as `not valid UTF-8` at the right line and field (so `skip_invalid` can skip such rows).
pub(crate) fn decode(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_parse_exactly() {
        assert_eq!(parse_micros("12.345678"), Ok(12_345_678));
        assert_eq!(parse_micros("0.0000005"), Ok(1));
        assert_eq!(parse_micros(".5"), Ok(500_000));
        assert_eq!(parse_micros("7."), Ok(7_000_000));
        assert_eq!(parse_micros("1e3"), Ok(1_000_000_000));
        assert_eq!(parse_micros("-0"), Ok(0));
        assert!(matches!(parse_micros("-1"), Err(K::Negative(_))));
        assert!(matches!(parse_micros("NaN"), Err(K::NotFinite(_))));
        assert!(matches!(parse_micros("inf"), Err(K::NotFinite(_))));
        assert!(matches!(parse_micros("abc"), Err(K::NotANumber(_))));
        assert!(matches!(parse_micros("."), Err(K::NotANumber(_))));
        assert!(matches!(
            parse_micros("99999999999999999999"),
            Err(K::TimeTooLarge(_))
        ));
        // Issue 10: 18,446,744,000,000 s fits in u64 microseconds only just, and saturated
        // the clock; anything past the input limit is refused.
        assert!(matches!(
            parse_micros("18446744000000"),
            Err(K::TimeTooLarge(_))
        ));
        assert!(matches!(parse_micros("1e13"), Err(K::TimeTooLarge(_))));
        assert_eq!(parse_micros("1000000000"), Ok(1_000_000_000_000_000));
        assert!(matches!(
            parse_micros("1000000000.000001"),
            Err(K::TimeTooLarge(_))
        ));
        assert!(matches!(
            computed_duration(1.8e19 / 3.0),
            Err(K::TimeTooLarge(_))
        ));
        assert_eq!(computed_duration(1e-9), Ok(SimDuration::from_micros(1)));
        assert!(matches!(parse_micros(""), Err(K::EmptyValue)));
    }

    #[test]
    fn counts_and_gpus() {
        assert_eq!(parse_count("8"), Ok(8));
        assert_eq!(parse_count("8.0"), Ok(8));
        assert!(matches!(parse_count("8.5"), Err(K::Invalid(_))));
        assert!(matches!(parse_count("-2"), Err(K::Negative(_))));
        assert!(matches!(check_gpus(0, "0"), Err(K::NotPositive(_))));
        assert!(matches!(check_gpus(1_000_001, "x"), Err(K::TooManyGpus(_))));
        assert_eq!(check_gpus(1_000_000, "x"), Ok(1_000_000));
    }

    #[test]
    fn default_iterations_round_up() {
        assert_eq!(default_iterations(SimDuration::from_micros(1)), 1);
        assert_eq!(default_iterations(SimDuration::from_secs(3)), 3);
        assert_eq!(default_iterations(SimDuration::from_micros(3_000_001)), 4);
    }
}
