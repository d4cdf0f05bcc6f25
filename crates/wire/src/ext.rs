//! The `extFields` of a command: a small string map that keeps its entries in the order they
//! arrived or were inserted.
//!
//! A send request carries about a dozen fields and is read a few times, so a vector searched
//! front to back beats a tree or a hash map, and decoding borrows every key and value from the
//! frame's header bytes instead of allocating a string for each. Keys written by this crate's
//! callers are usually literals, which cost nothing to store either.

use std::fmt;

use bytes::Bytes;

/// UTF-8 text held as `Bytes`: a literal, a slice of a decoded frame, or an owned string.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ExtText(Bytes);

impl ExtText {
    /// Text taken from a frame; None when the bytes are not UTF-8.
    pub fn from_utf8(bytes: Bytes) -> Option<ExtText> {
        std::str::from_utf8(&bytes).ok()?;
        Some(ExtText(bytes))
    }

    pub fn as_str(&self) -> &str {
        // SAFETY: every constructor checks or inherits UTF-8 validity: `from_utf8` checks, the
        // `From` impls take `&'static str` and `String`, and the bytes are never mutated.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
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
        ExtText(Bytes::from_static(text.as_bytes()))
    }
}

impl From<String> for ExtText {
    fn from(text: String) -> ExtText {
        ExtText(Bytes::from(text))
    }
}

impl From<&String> for ExtText {
    fn from(text: &String) -> ExtText {
        ExtText(Bytes::copy_from_slice(text.as_bytes()))
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
    entries: Vec<(ExtText, ExtText)>,
}

impl ExtFields {
    pub fn new() -> Self {
        ExtFields {
            entries: Vec::new(),
        }
    }

    pub fn with_capacity(entries: usize) -> Self {
        ExtFields {
            entries: Vec::with_capacity(entries),
        }
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.entries.iter().position(|(k, _)| k.as_str() == key)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k.as_str() == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn insert(&mut self, key: impl Into<ExtText>, value: impl Into<ExtText>) {
        let key = key.into();
        let value = value.into();
        match self.position(key.as_str()) {
            Some(index) => self.entries[index].1 = value,
            None => self.entries.push((key, value)),
        }
    }

    pub fn with(mut self, key: impl Into<ExtText>, value: impl ToString) -> Self {
        self.insert(key, value.to_string());
        self
    }

    pub fn remove(&mut self, key: &str) -> Option<String> {
        let index = self.position(key)?;
        Some(self.entries.remove(index).1.as_str().to_owned())
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
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
    fn text_from_frame_bytes_must_be_utf8() {
        assert_eq!(
            ExtText::from_utf8(Bytes::from_static(b"ok")).map(|t| t.to_string()),
            Some("ok".to_owned())
        );
        assert!(ExtText::from_utf8(Bytes::from_static(&[0xff, 0xfe])).is_none());
    }
}
