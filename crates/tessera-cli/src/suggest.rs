//! "Did you mean …" for names a user typed: policies, trace formats, built-ins.

/// The known names closest to `input` (case-insensitive edit similarity, or a shared prefix),
/// best first, at most three.
pub fn closest<'a>(input: &str, known: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let typed = input.trim().to_ascii_lowercase();
    let mut scored: Vec<(f64, &str)> = known
        .into_iter()
        .filter_map(|name| {
            let lower = name.to_ascii_lowercase();
            let mut score = strsim::normalized_damerau_levenshtein(&typed, &lower);
            // `srt` for `srtf`, `fifo+tun` for `fifo+tune`: a prefix is a strong hint.
            if !typed.is_empty() && (lower.starts_with(&typed) || typed.starts_with(&lower)) {
                score = score.max(0.75);
            }
            (score > 0.5).then_some((score, name))
        })
        .collect();
    // Stable order for equal scores: the order names are listed in.
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.into_iter().take(3).map(|(_, n)| n).collect()
}

/// ` (did you mean "x"?)`, ` (did you mean "x" or "y"?)`, or nothing.
pub fn hint<'a>(input: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    let names: Vec<String> = closest(input, known)
        .into_iter()
        .map(|n| format!("{n:?}"))
        .collect();
    match names.as_slice() {
        [] => String::new(),
        [one] => format!(" (did you mean {one}?)"),
        [init @ .., last] => format!(" (did you mean {} or {last}?)", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names_only() {
        let known = ["fifo", "srtf", "las", "ftf", "fifo+tune", "las+tune"];
        assert_eq!(closest("fiof", known), ["fifo"]);
        assert_eq!(closest("SRTF", known)[0], "srtf");
        assert_eq!(closest("fifo+tun", known)[0], "fifo+tune");
        assert!(closest("lottery", known).is_empty());
        assert_eq!(hint("lottery", known), "");
        assert_eq!(hint("fiof", known), " (did you mean \"fifo\"?)");
        assert!(hint("la", known).contains("\"las\""));
    }
}
