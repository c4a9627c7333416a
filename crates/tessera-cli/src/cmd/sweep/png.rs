//! PNG output of sweep charts: the chart's [`Shape`]s rasterised at twice their size, text in
//! a 5×7 bitmap font of our own, and a small PNG encoder (deflate with fixed Huffman codes and
//! greedy matching, which suits charts: mostly white with long runs).

use super::chart::{Anchor, Shape, H, W};

/// Pixels per chart unit: charts are laid out for 720×460 and drawn at 1440×920.
const SCALE: f64 = 2.0;

struct Canvas {
    w: usize,
    h: usize,
    rgb: Vec<u8>,
}

fn colour(hex: &str) -> [u8; 3] {
    let h = hex.trim_start_matches('#');
    let byte = |i: usize| {
        h.get(i..i + 2)
            .and_then(|s| u8::from_str_radix(s, 16).ok())
            .unwrap_or(0)
    };
    [byte(0), byte(2), byte(4)]
}

impl Canvas {
    fn new(w: usize, h: usize) -> Canvas {
        Canvas {
            w,
            h,
            rgb: vec![255; w * h * 3],
        }
    }

    fn set(&mut self, x: i64, y: i64, c: [u8; 3]) {
        if x >= 0 && y >= 0 && (x as usize) < self.w && (y as usize) < self.h {
            let i = (y as usize * self.w + x as usize) * 3;
            self.rgb[i..i + 3].copy_from_slice(&c);
        }
    }

    fn fill_rect(&mut self, x0: f64, y0: f64, x1: f64, y1: f64, c: [u8; 3]) {
        for y in y0.round() as i64..y1.round() as i64 {
            for x in x0.round() as i64..x1.round() as i64 {
                self.set(x, y, c);
            }
        }
    }

    fn disk(&mut self, cx: f64, cy: f64, r: f64, c: [u8; 3]) {
        let r2 = r * r;
        for y in (cy - r).floor() as i64..=(cy + r).ceil() as i64 {
            for x in (cx - r).floor() as i64..=(cx + r).ceil() as i64 {
                let (dx, dy) = (x as f64 + 0.5 - cx, y as f64 + 0.5 - cy);
                if dx * dx + dy * dy <= r2 {
                    self.set(x, y, c);
                }
            }
        }
    }

    /// A segment `width` pixels wide; `dash` is (on, off) lengths in pixels.
    fn segment(
        &mut self,
        a: (f64, f64),
        b: (f64, f64),
        width: f64,
        c: [u8; 3],
        dash: Option<(f64, f64)>,
    ) {
        let len = ((b.0 - a.0).powi(2) + (b.1 - a.1).powi(2)).sqrt();
        let steps = (len * 2.0).ceil().max(1.0) as usize;
        let r = (width / 2.0).max(0.5);
        for i in 0..=steps {
            let t = i as f64 / steps as f64;
            if let Some((on, off)) = dash {
                if (t * len) % (on + off) >= on {
                    continue;
                }
            }
            let (x, y) = (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t);
            if width <= 1.5 {
                self.set(x.floor() as i64, y.floor() as i64, c);
            } else {
                self.disk(x, y, r, c);
            }
        }
    }

    fn polygon(&mut self, pts: &[(f64, f64)], c: [u8; 3]) {
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for p in pts {
            x0 = x0.min(p.0);
            x1 = x1.max(p.0);
            y0 = y0.min(p.1);
            y1 = y1.max(p.1);
        }
        for y in y0.floor() as i64..=y1.ceil() as i64 {
            for x in x0.floor() as i64..=x1.ceil() as i64 {
                let (px, py) = (x as f64 + 0.5, y as f64 + 0.5);
                // Even-odd rule.
                let mut inside = false;
                let mut j = pts.len() - 1;
                for i in 0..pts.len() {
                    let (a, b) = (pts[i], pts[j]);
                    if (a.1 > py) != (b.1 > py) && px < (b.0 - a.0) * (py - a.1) / (b.1 - a.1) + a.0
                    {
                        inside = !inside;
                    }
                    j = i;
                }
                if inside {
                    self.set(x, y, c);
                }
            }
        }
    }

    fn text(&mut self, x: f64, y: f64, text: &str, anchor: Anchor, size: f64, vertical: bool) {
        // Font pixels per glyph pixel: 12-unit text gets 2, the 15-unit title 3.
        let px = (size * SCALE / 10.0).floor().max(1.0) as i64;
        let advance = 6 * px;
        let width = advance * text.chars().count() as i64 - px;
        let start = match anchor {
            Anchor::Start => 0,
            Anchor::Middle => -width / 2,
            Anchor::End => -width,
        };
        let (ox, oy) = (x.round() as i64, y.round() as i64);
        let c = [0, 0, 0];
        for (n, ch) in text.chars().enumerate() {
            let rows = glyph(ch);
            for (gy, row) in rows.iter().enumerate() {
                for gx in 0..5 {
                    if row & (0b10000 >> gx) == 0 {
                        continue;
                    }
                    // Along the text and across it, from the baseline up (7 rows above it).
                    let along = start + n as i64 * advance + gx as i64 * px;
                    let across = (gy as i64 - 7) * px;
                    for i in 0..px {
                        for j in 0..px {
                            if vertical {
                                self.set(ox + across + j, oy - along - i, c);
                            } else {
                                self.set(ox + along + i, oy + across + j, c);
                            }
                        }
                    }
                }
            }
        }
    }
}

fn marker_polygon(kind: usize, x: f64, y: f64) -> Vec<(f64, f64)> {
    let s = SCALE;
    match kind % 5 {
        1 => vec![
            (x - 4.0 * s, y - 4.0 * s),
            (x + 4.0 * s, y - 4.0 * s),
            (x + 4.0 * s, y + 4.0 * s),
            (x - 4.0 * s, y + 4.0 * s),
        ],
        2 => vec![
            (x, y - 5.0 * s),
            (x + 5.0 * s, y + 4.0 * s),
            (x - 5.0 * s, y + 4.0 * s),
        ],
        _ => vec![
            (x, y - 5.0 * s),
            (x + 5.0 * s, y),
            (x, y + 5.0 * s),
            (x - 5.0 * s, y),
        ],
    }
}

/// Draws the shapes and encodes them as a PNG file.
pub fn render(shapes: &[Shape]) -> Vec<u8> {
    let (w, h) = ((W * SCALE) as usize, (H * SCALE) as usize);
    let mut cv = Canvas::new(w, h);
    let p = |x: f64, y: f64| (x * SCALE, y * SCALE);
    for shape in shapes {
        match shape {
            Shape::Rect {
                x,
                y,
                w,
                h,
                fill,
                stroke,
            } => {
                let (x0, y0) = p(*x, *y);
                let (x1, y1) = p(x + w, y + h);
                if let Some(f) = fill {
                    cv.fill_rect(x0, y0, x1, y1, colour(f));
                }
                if let Some(s) = stroke {
                    let c = colour(s);
                    for (a, b) in [
                        ((x0, y0), (x1, y0)),
                        ((x1, y0), (x1, y1)),
                        ((x1, y1), (x0, y1)),
                        ((x0, y1), (x0, y0)),
                    ] {
                        cv.segment(a, b, SCALE, c, None);
                    }
                }
            }
            Shape::Line {
                points,
                colour: col,
                width,
                dashed,
            } => {
                let dash = dashed.then_some((6.0 * SCALE, 3.0 * SCALE));
                for pair in points.windows(2) {
                    let (a, b) = (p(pair[0].0, pair[0].1), p(pair[1].0, pair[1].1));
                    cv.segment(a, b, width * SCALE, colour(col), dash);
                }
            }
            Shape::Marker {
                kind,
                x,
                y,
                colour: col,
            } => {
                let (cx, cy) = p(*x, *y);
                let c = colour(col);
                match kind % 5 {
                    0 => cv.disk(cx, cy, 4.0 * SCALE, c),
                    4 => {
                        let d = 4.0 * SCALE;
                        cv.segment((cx - d, cy - d), (cx + d, cy + d), 2.0 * SCALE, c, None);
                        cv.segment((cx - d, cy + d), (cx + d, cy - d), 2.0 * SCALE, c, None);
                    }
                    k => cv.polygon(&marker_polygon(k, cx, cy), c),
                }
            }
            Shape::Text {
                x,
                y,
                text,
                anchor,
                size,
                vertical,
            } => {
                let (tx, ty) = p(*x, *y);
                cv.text(tx, ty, text, *anchor, *size, *vertical);
            }
        }
    }
    encode_png(cv.w, cv.h, &cv.rgb)
}

// ---- PNG encoding ------------------------------------------------------------------------

fn crc32(bytes: &[u8]) -> u32 {
    let mut table = [0u32; 256];
    for (n, slot) in table.iter_mut().enumerate() {
        let mut c = n as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
        *slot = c;
    }
    let mut c = 0xFFFF_FFFFu32;
    for b in bytes {
        c = table[((c ^ *b as u32) & 0xFF) as usize] ^ (c >> 8);
    }
    c ^ 0xFFFF_FFFF
}

fn adler32(bytes: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in bytes.chunks(5552) {
        for x in chunk {
            a += *x as u32;
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    (b << 16) | a
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// An 8-bit RGB PNG.
pub fn encode_png(w: usize, h: usize, rgb: &[u8]) -> Vec<u8> {
    let stride = w * 3;
    let mut raw = Vec::with_capacity((stride + 1) * h);
    for row in rgb.chunks(stride).take(h) {
        raw.push(0); // filter: none
        raw.extend_from_slice(row);
    }
    let mut z = vec![0x78, 0x01];
    z.extend(deflate_fixed(&raw, stride + 1));
    z.extend_from_slice(&adler32(&raw).to_be_bytes());
    let mut out = vec![0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&(w as u32).to_be_bytes());
    ihdr.extend_from_slice(&(h as u32).to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &z);
    chunk(&mut out, b"IEND", &[]);
    out
}

struct Bits {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits {
    /// Appends the low `n` bits of `v`, least significant first (deflate's bit order).
    fn put(&mut self, v: u32, n: u32) {
        self.acc |= (v as u64) << self.n;
        self.n += n;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// Appends a Huffman code (most significant bit first).
    fn code(&mut self, code: u32, len: u32) {
        let rev = code.reverse_bits() >> (32 - len);
        self.put(rev, len);
    }

    fn literal(&mut self, sym: u32) {
        match sym {
            0..=143 => self.code(0x30 + sym, 8),
            144..=255 => self.code(0x190 + sym - 144, 9),
            256..=279 => self.code(sym - 256, 7),
            _ => self.code(0xC0 + sym - 280, 8),
        }
    }
}

const LEN_BASE: [u32; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
const LEN_EXTRA: [u32; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];
const DIST_BASE: [u32; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
    2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
];
const DIST_EXTRA: [u32; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13,
];

/// One fixed-Huffman deflate block. Matches are looked for at the previous pixel, the pixel
/// above (`row` bytes back) and the last position with the same 3 bytes.
fn deflate_fixed(data: &[u8], row: usize) -> Vec<u8> {
    const WINDOW: usize = 32_768;
    let mut bits = Bits {
        out: Vec::new(),
        acc: 0,
        n: 0,
    };
    bits.put(1, 1); // final block
    bits.put(1, 2); // fixed Huffman codes
    let mut last = vec![usize::MAX; 1 << 15];
    let hash = |i: usize| -> usize {
        let v = (data[i] as usize) << 16 | (data[i + 1] as usize) << 8 | data[i + 2] as usize;
        (v.wrapping_mul(2_654_435_761) >> 7) & 0x7FFF
    };
    let mut i = 0;
    while i < data.len() {
        let mut best = (0usize, 0usize);
        if i + 3 <= data.len() {
            let h = hash(i);
            let mut candidates = [3usize, row, usize::MAX];
            if last[h] != usize::MAX {
                candidates[2] = i - last[h];
            }
            for dist in candidates {
                if dist == 0 || dist > i || dist > WINDOW {
                    continue;
                }
                let max = (data.len() - i).min(258);
                let mut l = 0;
                while l < max && data[i + l] == data[i + l - dist] {
                    l += 1;
                }
                if l > best.0 {
                    best = (l, dist);
                }
            }
            last[h] = i;
        }
        if best.0 >= 3 {
            let (len, dist) = best;
            let li = LEN_BASE
                .iter()
                .rposition(|b| *b as usize <= len)
                .unwrap_or(0);
            bits.literal(257 + li as u32);
            bits.put(len as u32 - LEN_BASE[li], LEN_EXTRA[li]);
            let di = DIST_BASE
                .iter()
                .rposition(|b| *b as usize <= dist)
                .unwrap_or(0);
            bits.code(di as u32, 5);
            bits.put(dist as u32 - DIST_BASE[di], DIST_EXTRA[di]);
            for k in i + 1..(i + len).min(data.len().saturating_sub(2)) {
                last[hash(k)] = k;
            }
            i += len;
        } else {
            bits.literal(data[i] as u32);
            i += 1;
        }
    }
    bits.literal(256);
    bits.put(0, 7); // flush the last byte
    bits.out
}

// ---- the font --------------------------------------------------------------------------

/// Rows (top to bottom) of a 5×7 glyph, bit 4 the leftmost column; lower-case descenders sit
/// in the last row. Unknown characters are drawn as a box.
fn glyph(c: char) -> [u8; 7] {
    match c {
        ' ' => [0; 7],
        '0' => [14, 17, 19, 21, 25, 17, 14],
        '1' => [4, 12, 4, 4, 4, 4, 14],
        '2' => [14, 17, 1, 2, 4, 8, 31],
        '3' => [31, 2, 4, 2, 1, 17, 14],
        '4' => [2, 6, 10, 18, 31, 2, 2],
        '5' => [31, 16, 30, 1, 1, 17, 14],
        '6' => [6, 8, 16, 30, 17, 17, 14],
        '7' => [31, 1, 2, 4, 8, 8, 8],
        '8' => [14, 17, 17, 14, 17, 17, 14],
        '9' => [14, 17, 17, 15, 1, 2, 12],
        'A' => [14, 17, 17, 31, 17, 17, 17],
        'B' => [30, 17, 17, 30, 17, 17, 30],
        'C' => [14, 17, 16, 16, 16, 17, 14],
        'D' => [28, 18, 17, 17, 17, 18, 28],
        'E' => [31, 16, 16, 30, 16, 16, 31],
        'F' => [31, 16, 16, 30, 16, 16, 16],
        'G' => [14, 17, 16, 23, 17, 17, 15],
        'H' => [17, 17, 17, 31, 17, 17, 17],
        'I' => [14, 4, 4, 4, 4, 4, 14],
        'J' => [7, 2, 2, 2, 2, 18, 12],
        'K' => [17, 18, 20, 24, 20, 18, 17],
        'L' => [16, 16, 16, 16, 16, 16, 31],
        'M' => [17, 27, 21, 21, 17, 17, 17],
        'N' => [17, 17, 25, 21, 19, 17, 17],
        'O' => [14, 17, 17, 17, 17, 17, 14],
        'P' => [30, 17, 17, 30, 16, 16, 16],
        'Q' => [14, 17, 17, 17, 21, 18, 13],
        'R' => [30, 17, 17, 30, 20, 18, 17],
        'S' => [15, 16, 16, 14, 1, 1, 30],
        'T' => [31, 4, 4, 4, 4, 4, 4],
        'U' => [17, 17, 17, 17, 17, 17, 14],
        'V' => [17, 17, 17, 17, 17, 10, 4],
        'W' => [17, 17, 17, 21, 21, 21, 10],
        'X' => [17, 17, 10, 4, 10, 17, 17],
        'Y' => [17, 17, 17, 10, 4, 4, 4],
        'Z' => [31, 1, 2, 4, 8, 16, 31],
        'a' => [0, 0, 14, 1, 15, 17, 15],
        'b' => [16, 16, 22, 25, 17, 17, 30],
        'c' => [0, 0, 14, 16, 16, 17, 14],
        'd' => [1, 1, 13, 19, 17, 17, 15],
        'e' => [0, 0, 14, 17, 31, 16, 14],
        'f' => [6, 9, 8, 28, 8, 8, 8],
        'g' => [0, 0, 15, 17, 15, 1, 14],
        'h' => [16, 16, 22, 25, 17, 17, 17],
        'i' => [4, 0, 12, 4, 4, 4, 14],
        'j' => [2, 0, 6, 2, 2, 18, 12],
        'k' => [16, 16, 18, 20, 24, 20, 18],
        'l' => [12, 4, 4, 4, 4, 4, 14],
        'm' => [0, 0, 26, 21, 21, 17, 17],
        'n' => [0, 0, 22, 25, 17, 17, 17],
        'o' => [0, 0, 14, 17, 17, 17, 14],
        'p' => [0, 0, 30, 17, 30, 16, 16],
        'q' => [0, 0, 15, 17, 15, 1, 1],
        'r' => [0, 0, 22, 25, 16, 16, 16],
        's' => [0, 0, 14, 16, 14, 1, 30],
        't' => [8, 8, 28, 8, 8, 9, 6],
        'u' => [0, 0, 17, 17, 17, 19, 13],
        'v' => [0, 0, 17, 17, 17, 10, 4],
        'w' => [0, 0, 17, 17, 21, 21, 10],
        'x' => [0, 0, 17, 10, 4, 10, 17],
        'y' => [0, 0, 17, 17, 15, 1, 14],
        'z' => [0, 0, 31, 2, 4, 8, 31],
        '.' => [0, 0, 0, 0, 0, 12, 12],
        ',' => [0, 0, 0, 0, 12, 4, 8],
        '-' => [0, 0, 0, 31, 0, 0, 0],
        '_' => [0, 0, 0, 0, 0, 0, 31],
        ':' => [0, 12, 12, 0, 12, 12, 0],
        ';' => [0, 12, 12, 0, 12, 4, 8],
        '(' => [2, 4, 8, 8, 8, 4, 2],
        ')' => [8, 4, 2, 2, 2, 4, 8],
        '[' => [14, 8, 8, 8, 8, 8, 14],
        ']' => [14, 2, 2, 2, 2, 2, 14],
        '/' => [0, 1, 2, 4, 8, 16, 0],
        '%' => [24, 25, 2, 4, 8, 19, 3],
        '+' => [0, 4, 4, 31, 4, 4, 0],
        '=' => [0, 0, 31, 0, 31, 0, 0],
        '<' => [2, 4, 8, 16, 8, 4, 2],
        '>' => [8, 4, 2, 1, 2, 4, 8],
        '±' => [4, 4, 31, 4, 4, 0, 31],
        '×' => [0, 17, 10, 4, 10, 17, 0],
        '*' => [0, 4, 21, 14, 21, 4, 0],
        '\'' => [4, 4, 8, 0, 0, 0, 0],
        '"' => [10, 10, 10, 0, 0, 0, 0],
        '!' => [4, 4, 4, 4, 4, 0, 4],
        '?' => [14, 17, 1, 2, 4, 0, 4],
        '#' => [10, 10, 31, 10, 31, 10, 10],
        '&' => [12, 18, 20, 8, 21, 18, 13],
        '|' => [4, 4, 4, 4, 4, 4, 4],
        '^' => [4, 10, 17, 0, 0, 0, 0],
        '~' => [0, 0, 8, 21, 2, 0, 0],
        '@' => [14, 17, 23, 21, 23, 16, 14],
        '$' => [4, 15, 20, 14, 5, 30, 4],
        _ => [31, 17, 17, 17, 17, 17, 31],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test-only inflater for fixed-Huffman blocks: enough to read back what we write.
    fn inflate_fixed(z: &[u8]) -> Vec<u8> {
        let mut pos = 0usize; // bit position
        let mut bit = |n: u32| -> u32 {
            let mut v = 0;
            for k in 0..n {
                let b = (z[pos / 8] >> (pos % 8)) & 1;
                v |= (b as u32) << k;
                pos += 1;
            }
            v
        };
        assert_eq!(bit(1), 1, "final block");
        assert_eq!(bit(2), 1, "fixed codes");
        let mut out: Vec<u8> = Vec::new();
        loop {
            // Read a literal/length code MSB-first, 7 to 9 bits.
            let mut code = 0u32;
            let mut len = 0;
            let sym = loop {
                code = (code << 1) | bit(1);
                len += 1;
                match len {
                    7 if code <= 0b0010111 => break code + 256,
                    8 if (0x30..=0xBF).contains(&code) => break code - 0x30,
                    8 if (0xC0..=0xC7).contains(&code) => break code - 0xC0 + 280,
                    9 => break code - 0x190 + 144,
                    _ => {}
                }
            };
            match sym {
                0..=255 => out.push(sym as u8),
                256 => break,
                _ => {
                    let li = (sym - 257) as usize;
                    let length = LEN_BASE[li] + bit(LEN_EXTRA[li]);
                    let mut d = 0u32;
                    for _ in 0..5 {
                        d = (d << 1) | bit(1);
                    }
                    let dist = (DIST_BASE[d as usize] + bit(DIST_EXTRA[d as usize])) as usize;
                    for _ in 0..length {
                        out.push(out[out.len() - dist]);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn png_round_trips_pixels_with_valid_checksums() {
        let (w, h) = (37, 23);
        let rgb: Vec<u8> = (0..w * h * 3)
            .map(|i| {
                if (i / 3) % 7 < 3 {
                    255
                } else {
                    (i * 31 % 251) as u8
                }
            })
            .collect();
        let png = encode_png(w, h, &rgb);
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        // Walk the chunks, checking each CRC.
        let mut i = 8;
        let mut idat = Vec::new();
        let mut kinds = Vec::new();
        while i < png.len() {
            let n = u32::from_be_bytes(png[i..i + 4].try_into().unwrap()) as usize;
            let kind = &png[i + 4..i + 8];
            let crc = u32::from_be_bytes(png[i + 8 + n..i + 12 + n].try_into().unwrap());
            assert_eq!(crc, crc32(&png[i + 4..i + 8 + n]));
            if kind == b"IDAT" {
                idat.extend_from_slice(&png[i + 8..i + 8 + n]);
            }
            kinds.push(String::from_utf8_lossy(kind).into_owned());
            i += 12 + n;
        }
        assert_eq!(kinds, ["IHDR", "IDAT", "IEND"]);
        assert_eq!(&idat[..2], &[0x78, 0x01]);
        let raw = inflate_fixed(&idat[2..idat.len() - 4]);
        assert_eq!(
            u32::from_be_bytes(idat[idat.len() - 4..].try_into().unwrap()),
            adler32(&raw)
        );
        assert_eq!(raw.len(), (w * 3 + 1) * h);
        for (r, row) in raw.chunks(w * 3 + 1).enumerate() {
            assert_eq!(row[0], 0);
            assert_eq!(&row[1..], &rgb[r * w * 3..(r + 1) * w * 3]);
        }
    }

    #[test]
    fn known_checksums() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
    }
}
