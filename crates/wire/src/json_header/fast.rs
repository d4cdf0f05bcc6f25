//! The common JSON header read in one pass over its bytes: a flat object whose ext keys and
//! values point into the frame instead of being copied, as the binary header's do. Java
//! clients send every request this way by default, so this runs once per send.
//!
//! It answers None for anything outside the shape clients send (a nested value where none
//! belongs, a fraction or exponent, an escaped key, extFields twice, malformed input), and the
//! caller then reads the header with serde_json, which decides every such case and words the
//! errors. So this reader needs to be right only on what it accepts: where it answers Some,
//! the answer is the one the general reader gives (a property test checks that).

use bytes::Bytes;

use crate::command::{Command, Encoding, LanguageCode};
use crate::ext::{ExtFields, FrameValue};

pub(crate) fn decode(header: &Bytes) -> Option<Command> {
    // Every range taken below is then UTF-8: it starts and ends at ASCII quotes.
    std::str::from_utf8(header).ok()?;
    let mut reader = Reader {
        bytes: header,
        at: 0,
    };
    let mut command = Command {
        code: 0,
        language: LanguageCode::JAVA,
        version: 0,
        opaque: 0,
        flag: 0,
        remark: None,
        ext: None,
        body: Bytes::new(),
        encoding: Encoding::Json,
    };
    let mut ext_seen = false;
    reader.expect(b'{')?;
    if !reader.eat(b'}') {
        loop {
            let key = reader.plain_string()?;
            reader.expect(b':')?;
            match &header[key] {
                b"code" => command.code = reader.int_or_null()?,
                b"version" => command.version = reader.int_or_null()?,
                b"opaque" => command.opaque = reader.int_or_null()?,
                b"flag" => command.flag = reader.int_or_null()?,
                b"language" => {
                    command.language = match reader.string_or_null()? {
                        None => LanguageCode::JAVA,
                        Some(FrameValue::Range(range)) => {
                            let name = std::str::from_utf8(&header[range]).ok()?;
                            LanguageCode::from_name(name).unwrap_or(LanguageCode::OTHER)
                        }
                        Some(FrameValue::Owned(_)) => return None,
                    }
                }
                b"remark" => {
                    command.remark = match reader.string_or_null()? {
                        None => None,
                        Some(FrameValue::Range(range)) => {
                            Some(std::str::from_utf8(&header[range]).ok()?.to_owned())
                        }
                        Some(FrameValue::Owned(text)) => Some(text),
                    }
                }
                b"extFields" => {
                    // Twice is legal JSON (the last wins); the general reader handles it.
                    if ext_seen {
                        return None;
                    }
                    ext_seen = true;
                    command.ext = reader.ext_fields(header)?;
                }
                _ => reader.skip_scalar()?,
            }
            if reader.eat(b',') {
                continue;
            }
            reader.expect(b'}')?;
            break;
        }
    }
    reader.skip_space();
    (reader.at == header.len()).then_some(command)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn skip_space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// Skips whitespace, then takes `byte` if it is next.
    fn eat(&mut self, byte: u8) -> bool {
        self.skip_space();
        if self.bytes.get(self.at) == Some(&byte) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.eat(byte).then_some(())
    }

    fn eat_literal(&mut self, literal: &[u8]) -> bool {
        self.skip_space();
        if self.bytes[self.at..].starts_with(literal) {
            self.at += literal.len();
            true
        } else {
            false
        }
    }

    /// A string without escapes: its contents' range.
    fn plain_string(&mut self) -> Option<std::ops::Range<usize>> {
        match self.string()? {
            FrameValue::Range(range) => Some(range),
            FrameValue::Owned(_) => None,
        }
    }

    fn string_or_null(&mut self) -> Option<Option<FrameValue>> {
        if self.eat_literal(b"null") {
            return Some(None);
        }
        self.string().map(Some)
    }

    /// A string: the range of its contents when it has no escapes, else its decoded text.
    /// Raw control characters are not JSON: None.
    fn string(&mut self) -> Option<FrameValue> {
        self.expect(b'"')?;
        let start = self.at;
        loop {
            match *self.bytes.get(self.at)? {
                b'"' => {
                    let range = start..self.at;
                    self.at += 1;
                    return Some(FrameValue::Range(range));
                }
                b'\\' => break,
                byte if byte < 0x20 => return None,
                _ => self.at += 1,
            }
        }
        let mut text = std::str::from_utf8(&self.bytes[start..self.at])
            .ok()?
            .to_owned();
        loop {
            let plain = self.at;
            while let Some(&byte) = self.bytes.get(self.at) {
                if byte == b'"' || byte == b'\\' || byte < 0x20 {
                    break;
                }
                self.at += 1;
            }
            text.push_str(std::str::from_utf8(&self.bytes[plain..self.at]).ok()?);
            match *self.bytes.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    return Some(FrameValue::Owned(text));
                }
                b'\\' => {
                    let escaped = *self.bytes.get(self.at + 1)?;
                    self.at += 2;
                    let ch = match escaped {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        // Surrogate pairs and the like are left to the general reader.
                        b'u' => char::from_u32(self.hex4()?)?,
                        _ => return None,
                    };
                    text.push(ch);
                }
                _ => return None,
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.bytes.get(self.at..self.at + 4)?;
        self.at += 4;
        let mut value = 0;
        for digit in digits {
            value = value * 16 + char::from(*digit).to_digit(16)?;
        }
        Some(value)
    }

    /// An integer literal's range: `-`, then `0` or digits without a leading zero. A fraction
    /// or an exponent: None.
    fn integer(&mut self) -> Option<std::ops::Range<usize>> {
        self.skip_space();
        let start = self.at;
        if self.bytes.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        let digits = self.at;
        while self.bytes.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        let count = self.at - digits;
        if count == 0 || (count > 1 && self.bytes[digits] == b'0') {
            return None;
        }
        // serde_json reads -0 as the float -0.0, which is not an integer.
        if digits > start && count == 1 && self.bytes[digits] == b'0' {
            return None;
        }
        if let Some(b'.' | b'e' | b'E') = self.bytes.get(self.at) {
            return None;
        }
        Some(start..self.at)
    }

    /// A header's int field: null is 0, as fastjson leaves a missing int.
    fn int_or_null(&mut self) -> Option<i32> {
        if self.eat_literal(b"null") {
            return Some(0);
        }
        let range = self.integer()?;
        std::str::from_utf8(&self.bytes[range]).ok()?.parse().ok()
    }

    /// An unknown top-level field's value, if it is a string, an integer or a literal.
    fn skip_scalar(&mut self) -> Option<()> {
        self.skip_space();
        match self.bytes.get(self.at)? {
            b'"' => self.string().map(drop),
            b'-' | b'0'..=b'9' => self.integer().map(drop),
            _ => (self.eat_literal(b"null")
                || self.eat_literal(b"true")
                || self.eat_literal(b"false"))
            .then_some(()),
        }
    }

    /// `extFields`: null, or an object of string values.
    fn ext_fields(&mut self, header: &Bytes) -> Option<Option<ExtFields>> {
        if self.eat_literal(b"null") {
            return Some(None);
        }
        self.expect(b'{')?;
        let mut ext = ExtFields::over_frame(header.clone());
        if self.eat(b'}') {
            return Some(Some(ext));
        }
        loop {
            let key = self.plain_string()?;
            self.expect(b':')?;
            // A null value removes a key given before it and still counts toward the limit:
            // the general reader's business.
            ext.push_from_frame(key, self.string()?)?;
            if ext.len() > crate::ext::EXT_FIELDS_MAX {
                return None;
            }
            if self.eat(b',') {
                continue;
            }
            self.expect(b'}')?;
            return Some(Some(ext));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn both(
        text: &[u8],
    ) -> (
        Option<Command>,
        Result<Command, crate::frame_error::FrameError>,
    ) {
        let header = Bytes::copy_from_slice(text);
        (decode(&header), super::super::decode_general(&header))
    }

    #[test]
    fn a_java_send_header_is_read_here_with_its_escaped_properties() {
        let text = br#"{"code":10,"extFields":{"a":"PG","b":"TopicTest","c":"TBW102","d":"4","e":"3","f":"0","g":"1700000000000","h":"0","i":"KEYS\u0001k1\u0002UNIQ_KEY\u0001AC1\u0002WAIT\u0001true\u0002TAGS\u0001TagA\u0002","j":"0","m":"false","n":"broker-a"},"flag":0,"language":"JAVA","opaque":42,"serializeTypeCurrentRPC":"JSON","version":475}"#;
        let (fast, general) = both(text);
        let fast = fast.expect("the common shape is read here");
        assert_eq!(fast, general.unwrap());
        let ext = fast.ext.as_ref().unwrap();
        assert_eq!(ext.get("i").unwrap().split('\u{2}').count(), 5);
        assert_eq!(ext.get("b"), Some("TopicTest"));
        assert_eq!((fast.code, fast.opaque, fast.version), (10, 42, 475));
    }

    #[test]
    fn shapes_outside_the_common_one_are_left_to_the_general_reader() {
        for text in [
            &br#"{"code":1.5}"#[..],
            br#"{"code":1e3}"#,
            br#"{"code":01}"#,
            br#"{"code":-0}"#,
            br#"{"code":"10"}"#,
            br#"{"language":9}"#,
            br#"{"extFields":{"k":1}}"#,
            br#"{"extFields":{"k":null}}"#,
            br#"{"extFields":{},"extFields":{}}"#,
            br#"{"x":[1]}"#,
            br#"{"c\u006fde":1}"#,
            br#"{"remark":"\ud83d\ude00"}"#,
            b"{\"remark\":\"a\x01\"}",
            br#"{"code":1} x"#,
            br#"{"code":1,}"#,
            b"{",
            b"",
        ] {
            assert!(
                decode(&Bytes::copy_from_slice(text)).is_none(),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }

    /// Header-like JSON: known and unknown keys in any order, whitespace, escapes, nulls,
    /// duplicates, numbers at and past the 32-bit limits.
    fn header_text() -> impl Strategy<Value = String> {
        let space = prop::sample::select(vec!["", " ", "\n\t ", "\r"]);
        let text = prop::sample::select(vec![
            "\"\"",
            "\"v\"",
            "\"a\\u0001b\\u0002\"",
            "\"q\\\"\\\\\\/\\n\"",
            "\"é\"",
            "\"\\ud83d\\ude00\"",
            "\"\\u00e9\"",
            "\"\\x\"",
            "\"\\u12\"",
        ]);
        let number = prop::sample::select(vec![
            "0",
            "-0",
            "7",
            "-2147483648",
            "2147483647",
            "2147483648",
            "01",
            "1.5",
            "2e3",
            "-",
        ]);
        let scalar = prop_oneof![
            text.clone().prop_map(str::to_owned),
            number.prop_map(str::to_owned),
            prop::sample::select(vec!["null", "true", "false", "[1]", "{}"])
                .prop_map(str::to_owned),
        ];
        let ext_value = prop_oneof![
            4 => text.clone().prop_map(str::to_owned),
            1 => scalar.clone(),
        ];
        let ext_key =
            prop::sample::select(vec!["\"a\"", "\"b\"", "\"\"", "\"topic\"", "\"\\u0061\""]);
        let ext =
            prop::collection::vec((ext_key, space.clone(), ext_value), 0..5).prop_map(|entries| {
                let body: Vec<String> = entries
                    .into_iter()
                    .map(|(key, space, value)| format!("{key}{space}:{space}{value}"))
                    .collect();
                format!("{{{}}}", body.join(","))
            });
        let key = prop::sample::select(vec![
            "code",
            "version",
            "opaque",
            "flag",
            "language",
            "remark",
            "extFields",
            "other",
        ]);
        let field = (
            key,
            space.clone(),
            prop_oneof![scalar, ext, Just("\"GO\"".to_string())],
        )
            .prop_map(|(key, space, value)| format!("\"{key}\"{space}:{space}{value}"));
        (prop::collection::vec(field, 0..8), space)
            .prop_map(|(fields, space)| format!("{space}{{{}}}{space}", fields.join(",")))
    }

    /// The property below says something only for headers this reader takes.
    #[test]
    fn the_generated_headers_are_often_taken_here() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = header_text();
        let taken = (0..1000)
            .filter(|_| {
                let text = strategy.new_tree(&mut runner).unwrap().current();
                decode(&Bytes::from(text)).is_some()
            })
            .count();
        assert!(taken >= 100, "only {taken} of 1000 taken");
    }

    proptest! {
        #[test]
        fn what_this_reader_takes_the_general_reader_reads_the_same(text in header_text()) {
            let (fast, general) = both(text.as_bytes());
            if let Some(fast) = fast {
                prop_assert_eq!(Ok(fast), general, "{}", text);
            }
        }

        #[test]
        fn a_damaged_header_is_never_read_differently(
            text in header_text(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            cut in any::<bool>(),
        ) {
            let mut bytes = text.into_bytes();
            if !bytes.is_empty() {
                let at = at.index(bytes.len());
                if cut { bytes.truncate(at) } else { bytes[at] = byte }
            }
            let (fast, general) = both(&bytes);
            if let Some(fast) = fast {
                prop_assert_eq!(Ok(fast), general);
            }
        }
    }
}
