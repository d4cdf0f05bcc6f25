//! Java properties text, as `broker.conf`, `namesrv.conf` and `controller.conf` hold it and as
//! UPDATE_BROKER_CONFIG and UPDATE_CONTROLLER_CONFIG carry it: `key=value` lines, `#` and `!`
//! comments.

/// The `key=value` lines of `text` with their 1-based line numbers, comments and blank lines
/// left out. A line with no value separator is an `Err` with its number and text.
pub fn entries(text: &str) -> impl Iterator<Item = Result<(usize, &str, &str), (usize, &str)>> {
    text.lines().enumerate().filter_map(|(index, raw)| {
        let line = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
            return None;
        }
        Some(
            split_line(trimmed)
                .map(|(key, value)| (line, key, value))
                .ok_or((line, trimmed)),
        )
    })
}

/// A trimmed line split as `java.util.Properties` does: the key ends at the first `=`, `:` or
/// white space, and one `=` or `:` with the white space around it separates the value.
pub fn split_line(line: &str) -> Option<(&str, &str)> {
    let end = line.find(['=', ':', ' ', '\t', '\u{c}'])?;
    let (key, rest) = line.split_at(end);
    let rest = rest.trim_start_matches([' ', '\t', '\u{c}']);
    let rest = rest
        .strip_prefix(['=', ':'])
        .unwrap_or(rest)
        .trim_start_matches([' ', '\t', '\u{c}']);
    Some((key, rest.trim_end()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_as_java_splits_them() {
        let text = "# comment\n! also\n\na=1\nb = two words \nc:3\nd 4\nbare\n";
        let got: Vec<_> = entries(text).collect();
        assert_eq!(
            got,
            vec![
                Ok((4, "a", "1")),
                Ok((5, "b", "two words")),
                Ok((6, "c", "3")),
                Ok((7, "d", "4")),
                Err((8, "bare")),
            ]
        );
    }
}
