//! Standard output for every command, with a closed pipe told apart from a failure.
//!
//! `tessera … | head` closes stdout early. Writes then fail with `BrokenPipe`, and the error
//! may reach `main` as text (a trace writer's error, a CSV error), no longer an
//! `io::Error`. Every write to stdout goes through [`stdout`], which notes the closed pipe,
//! so `main` can end quietly with exit 0 however the error was wrapped.

use std::io::{ErrorKind, StdoutLock, Write};
use std::sync::atomic::{AtomicBool, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether a write to stdout has found the reading end closed.
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// Notes that stdout's reader has gone (also called when a `print!` panics on a closed pipe).
pub fn mark_closed() {
    CLOSED.store(true, Ordering::Relaxed);
}

/// Locked stdout that records a broken pipe before returning the error.
pub struct Stdout(StdoutLock<'static>);

/// Stdout for a command's output (use instead of `println!`, which panics on a closed pipe).
pub fn stdout() -> Stdout {
    Stdout(std::io::stdout().lock())
}

fn note<T>(r: std::io::Result<T>) -> std::io::Result<T> {
    if let Err(e) = &r {
        if e.kind() == ErrorKind::BrokenPipe {
            mark_closed();
        }
    }
    r
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        note(self.0.write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        note(self.0.write_all(buf))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        note(self.0.flush())
    }
}

/// A writer (a file named on the command line, which may be `/dev/stdout` or a FIFO) whose
/// broken pipe is noted as stdout's is: the reader went away, not a failure.
pub struct Watched<W>(pub W);

impl<W: Write> Write for Watched<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        note(self.0.write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        note(self.0.write_all(buf))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        note(self.0.flush())
    }
}

/// `text` for the terminal, line by line: control characters that input names carry (a
/// model, tensor or tenant name) are escaped, the line breaks of the listing itself kept.
pub fn printable_lines(text: &str) -> String {
    text.split('\n')
        .map(tessera_trace::printable)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `n` and the noun, singular for 1: `1 job`, `3 jobs`, `1 policy`, `2 policies`.
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        return format!("1 {noun}");
    }
    let plural = match noun.strip_suffix('y') {
        Some(stem) if !stem.ends_with(['a', 'e', 'o', 'u']) => format!("{stem}ies"),
        _ => format!("{noun}s"),
    };
    format!("{n} {plural}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_are_singular_for_one() {
        use super::count;
        assert_eq!(count(1u32, "job"), "1 job");
        assert_eq!(count(0u32, "job"), "0 jobs");
        assert_eq!(count(2u32, "policy"), "2 policies");
        assert_eq!(count(1u32, "thread"), "1 thread");
        assert_eq!(count(4u32, "day"), "4 days");
    }
}
