//! JSON header (serialize type 0): the fastjson form of Java's RemotingCommand.
//!
//! Output mirrors Java: keys in alphabetical order, null fields left out, `language` by name,
//! every ext value a string. Input is lenient the way fastjson is: any key order, whitespace,
//! `null` remark/extFields, duplicate keys (last wins), numbers or booleans as ext values.

use std::fmt::Write as _;

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Map, Value};

use crate::command::{Command, Encoding, LanguageCode};
use crate::ext::ExtFields;
use crate::frame_error::FrameError;

fn bad(reason: impl Into<String>) -> FrameError {
    FrameError::BadJsonHeader(reason.into())
}

pub(crate) mod fast;

pub(crate) fn decode(header: &Bytes) -> Result<Command, FrameError> {
    match fast::decode(header) {
        Some(command) => Ok(command),
        None => decode_general(header),
    }
}

/// Any JSON header, through serde_json: what `fast` does not take, and every error.
pub(crate) fn decode_general(header: &Bytes) -> Result<Command, FrameError> {
    // serde_json's map keeps the last of duplicate keys, which is the rule we want.
    let value: Value = serde_json::from_slice(header).map_err(|err| bad(err.to_string()))?;
    let Value::Object(fields) = value else {
        return Err(bad("header is not a JSON object"));
    };
    let code = int_field(&fields, "code")?;
    let version = int_field(&fields, "version")?;
    let opaque = int_field(&fields, "opaque")?;
    let flag = int_field(&fields, "flag")?;
    let language = language_field(&fields)?;
    let remark = remark_field(&fields)?;
    let ext = ext_field(&fields)?;
    Ok(Command {
        code,
        language,
        version,
        opaque,
        flag,
        remark,
        ext,
        body: Bytes::new(),
        encoding: Encoding::Json,
    })
}

fn int_field(fields: &Map<String, Value>, name: &str) -> Result<i32, FrameError> {
    match fields.get(name) {
        // fastjson leaves a missing int at Java's default of 0.
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(number)) => number
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| bad(format!("{name} {number} is not a 32-bit integer"))),
        Some(Value::String(text)) => text
            .parse::<i32>()
            .map_err(|_| bad(format!("{name} {text:?} is not a 32-bit integer"))),
        Some(other) => Err(bad(format!("{name} has unexpected value {other}"))),
    }
}

/// The language by name (an unknown name is OTHER) or by ordinal; JAVA when absent.
fn language_field(fields: &Map<String, Value>) -> Result<LanguageCode, FrameError> {
    match fields.get("language") {
        None | Some(Value::Null) => Ok(LanguageCode::JAVA),
        Some(Value::String(name)) => {
            Ok(LanguageCode::from_name(name).unwrap_or(LanguageCode::OTHER))
        }
        Some(Value::Number(number)) => number
            .as_u64()
            .and_then(|n| u8::try_from(n).ok())
            .map(LanguageCode)
            .ok_or_else(|| bad(format!("language {number} is out of range"))),
        Some(other) => Err(bad(format!("language has unexpected value {other}"))),
    }
}

fn remark_field(fields: &Map<String, Value>) -> Result<Option<String>, FrameError> {
    match fields.get("remark") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(other) => Err(bad(format!("remark has unexpected value {other}"))),
    }
}

/// The ext fields, every value as text; a `null` value is left out.
fn ext_field(fields: &Map<String, Value>) -> Result<Option<ExtFields>, FrameError> {
    let entries = match fields.get("extFields") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(entries)) => entries,
        Some(other) => return Err(bad(format!("extFields has unexpected value {other}"))),
    };
    if entries.len() > crate::ext::EXT_FIELDS_MAX {
        return Err(bad(format!(
            "more than {} ext fields",
            crate::ext::EXT_FIELDS_MAX
        )));
    }
    let mut ext = ExtFields::new();
    for (key, value) in entries {
        let text = match value {
            Value::Null => continue,
            Value::String(text) => text.clone(),
            Value::Number(number) => number.to_string(),
            Value::Bool(flag) => flag.to_string(),
            other => return Err(bad(format!("ext {key:?} has unexpected value {other}"))),
        };
        ext.insert(key.clone(), text);
    }
    Ok(Some(ext))
}

pub(crate) fn encode(cmd: &Command, out: &mut BytesMut) {
    let mut text = String::with_capacity(160);
    // Writing into a String cannot fail, so the fmt results are ignored.
    let _ = write!(text, "{{\"code\":{}", cmd.code);
    if let Some(ext) = &cmd.ext {
        text.push_str(",\"extFields\":{");
        for (index, (key, value)) in ext.iter().enumerate() {
            if index > 0 {
                text.push(',');
            }
            push_json_string(&mut text, key);
            text.push(':');
            push_json_string(&mut text, value);
        }
        text.push('}');
    }
    let _ = write!(
        text,
        ",\"flag\":{},\"language\":\"{}\",\"opaque\":{}",
        cmd.flag,
        cmd.language.name(),
        cmd.opaque
    );
    if let Some(remark) = &cmd.remark {
        text.push_str(",\"remark\":");
        push_json_string(&mut text, remark);
    }
    let _ = write!(
        text,
        ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":{}}}",
        cmd.version
    );
    out.put_slice(text.as_bytes());
}

/// Appends `value` as a JSON string literal. Control characters become `\u00XX`, as fastjson
/// writes them; message properties rely on 0x01/0x02 surviving this.
pub(crate) fn push_json_string(out: &mut String, value: &str) {
    out.push('"');
    // Runs without anything to escape are copied whole; every byte escaped is ASCII, so the
    // cuts fall on character boundaries.
    let mut plain = 0;
    for (at, byte) in value.bytes().enumerate() {
        let escape = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            byte if byte < 0x20 => "",
            _ => continue,
        };
        out.push_str(&value[plain..at]);
        if escape.is_empty() {
            let _ = write!(out, "\\u{:04x}", byte);
        } else {
            out.push_str(escape);
        }
        plain = at + 1;
    }
    out.push_str(&value[plain..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Command, FrameError> {
        decode(&Bytes::copy_from_slice(text.as_bytes()))
    }

    #[test]
    fn ext_fields_past_the_limit_are_an_error() {
        let with = |count: usize| {
            let fields: Vec<String> = (0..count).map(|i| format!("\"k{i}\":\"v\"")).collect();
            format!("{{\"code\":10,\"extFields\":{{{}}}}}", fields.join(","))
        };
        assert!(parse(&with(crate::ext::EXT_FIELDS_MAX)).is_ok());
        let error = parse(&with(crate::ext::EXT_FIELDS_MAX + 1)).expect_err("past the limit");
        assert!(error.to_string().contains("ext fields"), "{error}");
    }

    #[test]
    fn encodes_keys_in_java_order() {
        let cmd = Command::request(105, Encoding::Json)
            .with_opaque(1)
            .with_ext(ExtFields::new().with("topic", "T"));
        let mut out = BytesMut::new();
        encode(&cmd, &mut out);
        assert_eq!(
            &out[..],
            br#"{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON","version":479}"#
        );
    }

    #[test]
    fn accepts_lenient_input() {
        let cmd = parse(
            r#" { "version" : 513, "remark" : null, "extFields" : {"a":"1","a":"2","n":3,"b":true,"z":null},
                 "opaque": 7, "code": 310, "language": "GO", "flag": 0, "unknown": [1] } "#,
        )
        .unwrap();
        assert_eq!(cmd.code, 310);
        assert_eq!(cmd.language, LanguageCode(9));
        assert_eq!(cmd.remark, None);
        let ext = cmd.ext.unwrap();
        assert_eq!(ext.get("a"), Some("2"));
        assert_eq!(ext.get("n"), Some("3"));
        assert_eq!(ext.get("b"), Some("true"));
        assert_eq!(ext.get("z"), None);
    }

    #[test]
    fn null_ext_is_absent_and_escapes_are_decoded() {
        let cmd = parse(r#"{"code":0,"extFields":null,"remark":"a\u0001b\u0002"}"#).unwrap();
        assert_eq!(cmd.ext, None);
        assert_eq!(cmd.remark.as_deref(), Some("a\u{1}b\u{2}"));
    }

    #[test]
    fn control_characters_round_trip() {
        let value = "KEYS\u{1}k\u{2}\"quoted\\\"\n\u{7f}é";
        let cmd = Command::request(310, Encoding::Json).with_ext(ExtFields::new().with("i", value));
        let mut out = BytesMut::new();
        encode(&cmd, &mut out);
        assert!(std::str::from_utf8(&out).unwrap().contains("\\u0001"));
        assert_eq!(decode(&out.freeze()).unwrap(), cmd);
    }

    proptest::proptest! {
        #[test]
        fn any_string_written_reads_back_the_same(value in ".*", control in proptest::char::range('\u{0}', '\u{1f}')) {
            let value = format!("{value}{control}{value}\"\\");
            let mut out = String::new();
            push_json_string(&mut out, &value);
            proptest::prop_assert_eq!(serde_json::from_str::<String>(&out).unwrap(), value);
        }
    }

    #[test]
    fn rejects_non_objects_and_bad_numbers() {
        assert!(parse("[1]").is_err());
        assert!(parse(r#"{"code":1.5}"#).is_err());
        assert!(parse(r#"{"code":99999999999}"#).is_err());
        assert!(parse(r#"{"extFields":{"k":[1]}}"#).is_err());
        assert!(parse("{").is_err());
    }
}
