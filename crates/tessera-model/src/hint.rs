//! Cache hints for hot loops over scattered per-job state.
//!
//! A simulator applying a batch of decisions visits one job's state after another, each a
//! likely cache miss on a large trace. Asking for the next job's lines while working on the
//! current one overlaps those misses with work instead of waiting on each in turn.

/// Asks the CPU to bring every cache line of `*value` toward the core, without waiting for
/// them. Only speed changes: nothing is read architecturally, and on targets without a
/// prefetch instruction this does nothing.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        const LINE: usize = 64;
        let start = std::ptr::from_ref(value).cast::<u8>();
        let size = std::mem::size_of::<T>().max(1);
        // From the line holding the first byte through the one holding the last.
        let lines = ((start as usize % LINE) + size).div_ceil(LINE);
        let first = start.wrapping_sub(start as usize % LINE);
        for i in 0..lines {
            // SAFETY: a prefetch is a hint: it never faults, whatever the address, and
            // neither reads nor writes memory architecturally.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    first.wrapping_add(i * LINE).cast::<i8>(),
                );
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetch_accepts_any_referent() {
        // A hint: it must neither fault nor change anything, whatever the size.
        let small = 7u8;
        let large = [1u64; 40];
        let empty = ();
        prefetch(&small);
        prefetch(&large);
        prefetch(&empty);
        assert_eq!((small, large[39]), (7, 1));
    }
}
