//! The `extFields` of a command: a small string map that keeps its entries in the order they
//! arrived or were inserted.
//!
//! A send request carries about a dozen fields and is read a few times, so a vector searched
//! front to back beats a tree or a hash map, and decoding borrows every key and value from the
//! frame's header bytes instead of allocating a string for each. Keys written by this crate's
//! callers are usually literals, which cost nothing to store either.

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;

/// The most entries a decoded header may carry. RocketMQ's largest request headers have a few
/// dozen fields; without a bound, a 16 MiB header of distinct short keys would take the
/// front-to-back duplicate check about 10^12 comparisons.
pub const EXT_FIELDS_MAX: usize = 1024;

/// The text of an entry the program wrote: a literal (no allocation) or an owned string.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ExtText(Cow<'static, str>);

impl ExtText {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&'static str> for ExtText {
    fn from(text: &'static str) -> ExtText {
        ExtText(Cow::Borrowed(text))
    }
}

impl From<String> for ExtText {
    fn from(text: String) -> ExtText {
        ExtText(Cow::Owned(text))
    }
}

impl From<&String> for ExtText {
    fn from(text: &String) -> ExtText {
        ExtText(Cow::Owned(text.clone()))
    }
}

impl fmt::Debug for ExtText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for ExtText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `extFields` map. Inserting a key that is present replaces its value in place, so on
/// input the last duplicate key wins, as it does in Java's HashMap; output follows insertion
/// order, so a decoded frame re-encodes to the bytes it came from.
#[derive(Clone, Default)]
pub struct ExtFields {
    /// The ext section of the frame this was decoded from (empty when built here): one shared
    /// handle for all the entries that point into it.
    frame: Bytes,
    entries: Vec<(Text, Text)>,
    /// `fingerprint` of each entry's key, in the same order: a lookup compares these integers
    /// and reads a key's text only where one matches. Decoding a send's header looks each of its
    /// dozen-odd keys up among those before it (the last duplicate wins), and comparing texts
    /// there took a few percent of the broker's CPU.
    fingerprints: Vec<u32>,
}

/// Where an entry's key or value lives.
/// A value for `ExtFields::push_from_frame`.
pub(crate) enum FrameValue {
    Range(std::ops::Range<usize>),
    Owned(String),
}

#[derive(Clone)]
enum Text {
    /// `frame[start..start + len]`, checked to be UTF-8 when decoded.
    Frame {
        start: u32,
        len: u32,
    },
    Own(ExtText),
}

/// A key's length (up to 255) with its first, middle and last bytes: keys differ in one of
/// those almost always, and most are one letter long.
fn fingerprint(key: &[u8]) -> u32 {
    let byte = |at: Option<&u8>| u32::from(at.copied().unwrap_or(0));
    let length = key.len().min(255) as u32;
    length << 24 | byte(key.first()) << 16 | byte(key.get(key.len() / 2)) << 8 | byte(key.last())
}

impl ExtFields {
    pub fn new() -> Self {
        ExtFields::default()
    }

    /// Entries that are ranges of `frame`; None when a range is out of bounds or not UTF-8.
    pub(crate) fn from_frame(
        frame: Bytes,
        ranges: &[(std::ops::Range<usize>, std::ops::Range<usize>)],
    ) -> Option<ExtFields> {
        let mut ext = ExtFields::over_frame(frame);
        ext.entries.reserve(ranges.len());
        ext.fingerprints.reserve(ranges.len());
        for (key, value) in ranges {
            ext.push_from_frame(key.clone(), FrameValue::Range(value.clone()))?;
        }
        Some(ext)
    }

    /// An empty map whose entries may be ranges of `frame` (see `push_from_frame`).
    pub(crate) fn over_frame(frame: Bytes) -> ExtFields {
        ExtFields {
            frame,
            entries: Vec::new(),
            fingerprints: Vec::new(),
        }
    }

    /// Adds a key that is a range of the frame, with a value that is one too or was decoded
    /// (a JSON string with escapes); a key seen before gets the new value, as in a map. None
    /// when a range is out of bounds or not UTF-8.
    pub(crate) fn push_from_frame(
        &mut self,
        key: std::ops::Range<usize>,
        value: FrameValue,
    ) -> Option<()> {
        let key = self.frame_text(&key)?;
        let value = match value {
            FrameValue::Range(range) => self.frame_text(&range)?,
            FrameValue::Owned(text) => Text::Own(ExtText::from(text)),
        };
        match self.position(self.text(&key)) {
            Some(index) => self.entries[index].1 = value,
            None => self.push(key, value),
        }
        Some(())
    }

    fn frame_text(&self, range: &std::ops::Range<usize>) -> Option<Text> {
        std::str::from_utf8(self.frame.get(range.clone())?).ok()?;
        Some(Text::Frame {
            start: u32::try_from(range.start).ok()?,
            len: u32::try_from(range.len()).ok()?,
        })
    }

    fn text<'a>(&'a self, text: &'a Text) -> &'a str {
        match text {
            Text::Own(text) => text.as_str(),
            Text::Frame { start, len } => {
                let (start, len) = (*start as usize, *len as usize);
                let bytes = &self.frame[start..start + len];
                // SAFETY: `from_frame` checked that this range of `frame` is UTF-8, and
                // `frame` is never changed while entries point into it.
                unsafe { std::str::from_utf8_unchecked(bytes) }
            }
        }
    }

    fn push(&mut self, key: Text, value: Text) {
        self.fingerprints
            .push(fingerprint(self.text(&key).as_bytes()));
        self.entries.push((key, value));
    }

    fn position(&self, key: &str) -> Option<usize> {
        let wanted = fingerprint(key.as_bytes());
        self.fingerprints
            .iter()
            .enumerate()
            .filter(|(_, fingerprint)| **fingerprint == wanted)
            .map(|(index, _)| index)
            .find(|index| self.text(&self.entries[*index].0) == key)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        let index = self.position(key)?;
        Some(self.text(&self.entries[index].1))
    }

    pub fn insert(&mut self, key: impl Into<ExtText>, value: impl Into<ExtText>) {
        let key = key.into();
        let value = Text::Own(value.into());
        match self.position(key.as_str()) {
            Some(index) => self.entries[index].1 = value,
            None => self.push(Text::Own(key), value),
        }
    }

    pub fn with(mut self, key: impl Into<ExtText>, value: impl ToString) -> Self {
        self.insert(key, value.to_string());
        self
    }

    pub fn remove(&mut self, key: &str) -> Option<String> {
        let index = self.position(key)?;
        let value = self.text(&self.entries[index].1).to_owned();
        self.entries.remove(index);
        self.fingerprints.remove(index);
        Some(value)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries
            .iter()
            .map(|(k, v)| (self.text(k), self.text(v)))
    }
}

/// Equal when they hold the same keys with the same values, in any order, as maps are.
impl PartialEq for ExtFields {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .iter()
                .all(|(key, value)| other.get(key) == Some(value))
    }
}

impl Eq for ExtFields {}

impl fmt::Debug for ExtFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Into<ExtText>, V: Into<ExtText>> FromIterator<(K, V)> for ExtFields {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut ext = ExtFields::new();
        for (key, value) in iter {
            ext.insert(key, value);
        }
        ext
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_with_one_fingerprint_are_told_apart_by_their_text() {
        // Same length, first, middle and last bytes.
        assert_eq!(fingerprint(b"axbcd"), fingerprint(b"aybcd"));
        let mut ext = ExtFields::new();
        ext.insert("axbcd", "1");
        ext.insert("aybcd", "2");
        ext.insert("axbcd", "3");
        assert_eq!(ext.get("axbcd"), Some("3"));
        assert_eq!(ext.get("aybcd"), Some("2"));
        assert_eq!(ext.get("azbcd"), None);
        assert_eq!(ext.remove("axbcd").as_deref(), Some("3"));
        assert_eq!(ext.get("aybcd"), Some("2"));
        assert_eq!(ext.len(), 1);
    }

    #[test]
    fn insert_replaces_in_place_and_keeps_order() {
        let mut ext = ExtFields::new();
        ext.insert("b", "1");
        ext.insert("a", "2");
        ext.insert("b", String::from("3"));
        assert_eq!(ext.iter().collect::<Vec<_>>(), [("b", "3"), ("a", "2")]);
        assert_eq!(ext.remove("b").as_deref(), Some("3"));
        assert_eq!(ext.get("b"), None);
        assert_eq!(ext.len(), 1);
    }

    #[test]
    fn equality_ignores_order() {
        let one: ExtFields = [("x", "1"), ("y", "2")].into_iter().collect();
        let two: ExtFields = [("y", "2"), ("x", "1")].into_iter().collect();
        let three: ExtFields = [("y", "2"), ("x", "9")].into_iter().collect();
        assert_eq!(one, two);
        assert_ne!(one, three);
        assert_ne!(one, ExtFields::new());
    }

    #[test]
    fn frame_entries_point_into_the_frame_and_the_last_duplicate_wins() {
        let frame = Bytes::from_static(b"akbvavx\xff");
        let ranges = [(0..1, 1..2), (2..3, 3..4), (4..5, 5..6)];
        let ext = ExtFields::from_frame(frame.clone(), &ranges).expect("utf-8");
        assert_eq!(ext.iter().collect::<Vec<_>>(), [("a", "v"), ("b", "v")]);
        assert_eq!(ext.get("a"), Some("v"));
        assert!(ExtFields::from_frame(frame.clone(), &[(0..1, 7..8)]).is_none());
        assert!(ExtFields::from_frame(frame, &[(0..1, 7..9)]).is_none());
    }
}
