//! CPython's `random` module, draw for draw.
//!
//! Published simulators written in Python (the Synergy reference among them) generate their
//! workloads from `random.seed(n)` and a fixed sequence of draws. To regenerate such a workload
//! job for job we need the same stream: the MT19937 Mersenne Twister seeded the way CPython
//! seeds it from an integer (`init_by_array` over the integer's 32-bit words), and the
//! derived draws computed with the same arithmetic as CPython 3 (`random()` from two words,
//! `getrandbits`, `randrange` by rejection on `getrandbits`, `uniform`, `expovariate`).
//! [`SimRng`](crate::SimRng) stays the generator for our own workloads; this one exists only
//! for compatibility.

const N: usize = 624;
const M: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;
const UPPER_MASK: u32 = 0x8000_0000;
const LOWER_MASK: u32 = 0x7fff_ffff;

/// A Mersenne Twister whose draws equal CPython's `random.Random` for the same seed.
#[derive(Clone)]
pub struct PyRandom {
    state: Box<[u32; N]>,
    index: usize,
}

impl std::fmt::Debug for PyRandom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PyRandom")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl PyRandom {
    /// The generator after `random.seed(seed)` for a non-negative integer seed (CPython uses
    /// the absolute value of an int seed, so this covers every int seed below 2^64).
    pub fn seed(seed: u64) -> PyRandom {
        // CPython splits |seed| into 32-bit words, least significant first; zero is [0].
        let low = seed as u32;
        let high = (seed >> 32) as u32;
        let key: Vec<u32> = if high == 0 {
            vec![low]
        } else {
            vec![low, high]
        };
        Self::from_key(&key)
    }

    /// `init_by_array(key)` of the reference MT19937 implementation.
    pub fn from_key(key: &[u32]) -> PyRandom {
        let mut mt = Self::init_genrand(19_650_218);
        let key: &[u32] = if key.is_empty() { &[0] } else { key };
        let mut i = 1usize;
        let mut j = 0usize;
        for _ in 0..N.max(key.len()) {
            let prev = mt.state[i - 1];
            mt.state[i] = (mt.state[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                mt.state[0] = mt.state[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            let prev = mt.state[i - 1];
            mt.state[i] = (mt.state[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_566_083_941))
                .wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                mt.state[0] = mt.state[N - 1];
                i = 1;
            }
        }
        // The most significant bit is 1, assuring a non-zero initial array.
        mt.state[0] = 0x8000_0000;
        mt
    }

    fn init_genrand(s: u32) -> PyRandom {
        let mut state = Box::new([0u32; N]);
        state[0] = s;
        for k in 1..N {
            let prev = state[k - 1];
            state[k] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(k as u32);
        }
        PyRandom { state, index: N }
    }

    fn twist(&mut self) {
        let mag = |y: u32| if y & 1 == 0 { 0 } else { MATRIX_A };
        for k in 0..N {
            let y = (self.state[k] & UPPER_MASK) | (self.state[(k + 1) % N] & LOWER_MASK);
            self.state[k] = self.state[(k + M) % N] ^ (y >> 1) ^ mag(y);
        }
        self.index = 0;
    }

    /// One tempered 32-bit output (`genrand_uint32`).
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^= y >> 18;
        y
    }

    /// `random.random()`: uniform in [0, 1) with 53 bits from two outputs.
    pub fn random(&mut self) -> f64 {
        let a = (self.next_u32() >> 5) as f64;
        let b = (self.next_u32() >> 6) as f64;
        (a * 67_108_864.0 + b) * (1.0 / 9_007_199_254_740_992.0)
    }

    /// `random.uniform(a, b)` = `a + (b - a) * random()`.
    pub fn uniform(&mut self, a: f64, b: f64) -> f64 {
        a + (b - a) * self.random()
    }

    /// `random.expovariate(lambd)` = `-log(1 - random()) / lambd` (CPython 3.11's formula).
    pub fn expovariate(&mut self, lambd: f64) -> f64 {
        -(1.0 - self.random()).ln() / lambd
    }

    /// `random.getrandbits(k)` for 0 ≤ k ≤ 64 (CPython fills 32-bit words from the least
    /// significant end; the last word keeps its top bits). `k = 0` is 0.
    pub fn getrandbits(&mut self, k: u32) -> u64 {
        let k = k.min(64);
        if k == 0 {
            return 0;
        }
        if k <= 32 {
            return u64::from(self.next_u32() >> (32 - k));
        }
        let low = u64::from(self.next_u32());
        let high = u64::from(self.next_u32() >> (64 - k));
        (high << 32) | low
    }

    /// `_randbelow(n)`: uniform in [0, n) by rejection on `getrandbits(n.bit_length())`; 0
    /// when `n` is 0 (where CPython would raise).
    pub fn randbelow(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let k = 64 - n.leading_zeros();
        loop {
            let r = self.getrandbits(k);
            if r < n {
                return r;
            }
        }
    }

    /// `random.randrange(start, stop)`: uniform in [start, stop); `start` when the range is
    /// empty (where CPython would raise).
    pub fn randrange(&mut self, start: i64, stop: i64) -> i64 {
        if stop <= start {
            return start;
        }
        let width = stop.abs_diff(start);
        start.wrapping_add(self.randbelow(width) as i64)
    }

    /// `random.randint(a, b)`: uniform in [a, b] (both included).
    pub fn randint(&mut self, a: i64, b: i64) -> i64 {
        self.randrange(a, b.saturating_add(1))
    }

    /// `random.choice(seq)`: an element by `_randbelow(len)`; `None` for an empty slice.
    pub fn choice<'a, T>(&mut self, seq: &'a [T]) -> Option<&'a T> {
        if seq.is_empty() {
            return None;
        }
        let i = self.randbelow(seq.len() as u64) as usize;
        seq.get(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Golden values printed by CPython 3.11.7 on this machine; the command is above each.

    // python3 -c 'import random; random.seed(42); print([random.random() for _ in range(5)])'
    #[test]
    fn random_matches_cpython_seed_42() {
        let mut r = PyRandom::seed(42);
        let want = [
            0.6394267984578837,
            0.025010755222666936,
            0.27502931836911926,
            0.22321073814882275,
            0.7364712141640124,
        ];
        for w in want {
            assert_eq!(r.random(), w);
        }
    }

    // python3 -c 'import random; random.seed(0); print([random.getrandbits(32) for _ in range(3)])'
    #[test]
    fn seed_zero_raw_words() {
        let mut r = PyRandom::seed(0);
        for w in [3_626_764_237u32, 1_654_615_998, 3_255_389_356] {
            assert_eq!(r.next_u32(), w);
        }
    }

    // Seeds wider than 32 bits are split into words, least significant first.
    // python3 -c 'import random; random.seed(2**40+5); print([random.random() for _ in range(3)])'
    // python3 -c 'import random; random.seed(2**64-1); print([random.getrandbits(32) for _ in range(2)])'
    #[test]
    fn multi_word_seeds() {
        let mut r = PyRandom::seed((1 << 40) + 5);
        for w in [0.5043802970418443, 0.2686044399723282, 0.9257865475671585] {
            assert_eq!(r.random(), w);
        }
        let mut r = PyRandom::seed(u64::MAX);
        assert_eq!(r.next_u32(), 93_740_670);
        assert_eq!(r.next_u32(), 1_068_495_656);
    }

    // python3 -c 'import random; random.seed(7); print([random.randint(0,9) for _ in range(20)])'
    #[test]
    fn randint_rejection_sampling_matches() {
        let mut r = PyRandom::seed(7);
        let want = [5, 2, 6, 0, 1, 8, 1, 5, 9, 0, 8, 3, 0, 1, 6, 6, 1, 3, 1, 8];
        for w in want {
            assert_eq!(r.randint(0, 9), w);
        }
    }

    // python3 -c 'import random; random.seed(7); print(random.uniform(1.5,3.0),
    //   random.expovariate(9.0), random.getrandbits(40), random.getrandbits(64),
    //   random.randrange(-5,1000), random.choice("abcde"), random.randint(0, 2**40))'
    #[test]
    fn derived_draws_match_in_sequence() {
        let mut r = PyRandom::seed(7);
        assert_eq!(r.uniform(1.5, 3.0), 1.9857491472497435);
        assert_eq!(r.expovariate(9.0), 0.018168717445053127);
        assert_eq!(r.getrandbits(40), 54_335_349_840);
        assert_eq!(r.getrandbits(64), 15_149_836_622_520_594_227);
        assert_eq!(r.randrange(-5, 1000), 543);
        assert_eq!(r.choice(&['a', 'b', 'c', 'd', 'e']), Some(&'a'));
        assert_eq!(r.randint(0, 1 << 40), 470_330_855_157);
    }

    // Far into the stream (many twists).
    // python3 -c 'import random; random.seed(42); [random.random() for _ in range(10000)]; print(random.random())'
    #[test]
    fn stream_stays_in_step_after_many_twists() {
        let mut r = PyRandom::seed(42);
        for _ in 0..10_000 {
            r.random();
        }
        assert_eq!(r.random(), 0.9479975965906395);
    }

    #[test]
    fn degenerate_ranges_do_not_panic() {
        let mut r = PyRandom::seed(1);
        assert_eq!(r.randrange(5, 5), 5);
        assert_eq!(r.randbelow(0), 0);
        assert_eq!(r.getrandbits(0), 0);
        assert_eq!(r.choice::<u8>(&[]), None);
        assert_eq!(r.randint(i64::MAX, i64::MAX), i64::MAX);
    }
}
