//! Typed request and response headers.
//!
//! Java turns a header object into ext entries named after its fields, with values from
//! `toString()`. Each struct here reads (`from_ext`) and writes (`to_ext`) exactly those entries:
//! numbers as decimal strings, booleans as "true"/"false". Unknown ext keys (`bname`, `ns`, ACL
//! keys, ...) are ignored on input.

mod admin;
mod consumer;
mod controller;
mod namesrv;
mod offset;
mod pop;
mod pull;
mod send;
mod transaction;

pub use admin::*;
pub use consumer::*;
pub use controller::*;
pub use namesrv::*;
pub use offset::*;
pub use pop::*;
pub use pull::*;
pub use send::*;
pub use transaction::*;

use crate::command::Command;
use crate::ext::ExtFields;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HeaderError {
    #[error("missing header field {0}")]
    Missing(&'static str),
    #[error("header field {field} has invalid value {value:?}")]
    Invalid { field: &'static str, value: String },
    #[error("request has no header fields")]
    NoExt,
}

/// The ext fields of a request, or `NoExt` when the request carried none.
pub fn ext_or_err(cmd: &Command) -> Result<&ExtFields, HeaderError> {
    cmd.ext.as_ref().ok_or(HeaderError::NoExt)
}

/// A value that travels as an ext string.
pub trait ExtValue: Sized {
    fn parse_ext(field: &'static str, raw: &str) -> Result<Self, HeaderError>;
    fn to_ext_string(&self) -> String;
}

impl ExtValue for String {
    fn parse_ext(_field: &'static str, raw: &str) -> Result<Self, HeaderError> {
        Ok(raw.to_owned())
    }
    fn to_ext_string(&self) -> String {
        self.clone()
    }
}

macro_rules! ext_value_number {
    ($($ty:ty),*) => {$(
        impl ExtValue for $ty {
            fn parse_ext(field: &'static str, raw: &str) -> Result<Self, HeaderError> {
                raw.parse().map_err(|_| HeaderError::Invalid { field, value: raw.to_owned() })
            }
            fn to_ext_string(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
ext_value_number!(i32, i64);

impl ExtValue for bool {
    fn parse_ext(field: &'static str, raw: &str) -> Result<Self, HeaderError> {
        if raw.eq_ignore_ascii_case("true") {
            Ok(true)
        } else if raw.eq_ignore_ascii_case("false") {
            Ok(false)
        } else {
            Err(HeaderError::Invalid {
                field,
                value: raw.to_owned(),
            })
        }
    }
    fn to_ext_string(&self) -> String {
        self.to_string()
    }
}

impl ExtFields {
    /// A field the header cannot do without.
    pub fn required<T: ExtValue>(&self, field: &'static str) -> Result<T, HeaderError> {
        match self.get(field) {
            Some(raw) => T::parse_ext(field, raw),
            None => Err(HeaderError::Missing(field)),
        }
    }

    /// A field that may be absent; present but unparsable is still an error.
    pub fn optional<T: ExtValue>(&self, field: &'static str) -> Result<Option<T>, HeaderError> {
        self.get(field)
            .map(|raw| T::parse_ext(field, raw))
            .transpose()
    }

    /// An optional field with a default for when it is absent.
    pub fn or_default<T: ExtValue>(
        &self,
        field: &'static str,
        default: T,
    ) -> Result<T, HeaderError> {
        Ok(self.optional(field)?.unwrap_or(default))
    }

    pub fn put<T: ExtValue>(&mut self, field: &'static str, value: &T) {
        self.insert(field, value.to_ext_string());
    }

    /// Writes the field only when it has a value, as Java leaves null fields out.
    pub fn put_opt<T: ExtValue>(&mut self, field: &'static str, value: &Option<T>) {
        if let Some(value) = value {
            self.put(field, value);
        }
    }
}

/// Declares the `from_ext` / `to_ext` pair for a header whose fields map one-to-one onto ext
/// keys. `req` fields must be present, `opt` fields are `Option`s, `def` fields take a default
/// when absent and are always written.
macro_rules! ext_header {
    ($ty:ident { $($field:ident : $kind:ident $key:literal $(= $default:expr)?),* $(,)? }) => {
        impl $ty {
            pub fn from_ext(ext: &$crate::ext::ExtFields) -> Result<Self, $crate::header::HeaderError> {
                Ok($ty { $($field: ext_header!(@read ext, $kind, $key $(, $default)?),)* })
            }
            pub fn to_ext(&self) -> $crate::ext::ExtFields {
                let mut ext = $crate::ext::ExtFields::new();
                $(ext_header!(@write ext, $kind, $key, &self.$field);)*
                ext
            }
        }
    };
    (@read $ext:ident, req, $key:literal) => { $ext.required($key)? };
    (@read $ext:ident, opt, $key:literal) => { $ext.optional($key)? };
    (@read $ext:ident, def, $key:literal, $default:expr) => { $ext.or_default($key, $default)? };
    (@write $ext:ident, opt, $key:literal, $value:expr) => { $ext.put_opt($key, $value) };
    (@write $ext:ident, $kind:ident, $key:literal, $value:expr) => { $ext.put($key, $value) };
}
pub(crate) use ext_header;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_report_missing_and_invalid_fields() {
        let ext = ExtFields::new()
            .with("n", "12")
            .with("b", "TRUE")
            .with("bad", "x1");
        assert_eq!(ext.required::<i32>("n"), Ok(12));
        assert_eq!(ext.required::<bool>("b"), Ok(true));
        assert_eq!(
            ext.required::<i64>("gone"),
            Err(HeaderError::Missing("gone"))
        );
        assert_eq!(
            ext.optional::<i64>("bad"),
            Err(HeaderError::Invalid {
                field: "bad",
                value: "x1".into()
            })
        );
        assert_eq!(ext.optional::<bool>("gone"), Ok(None));
        assert_eq!(ext.or_default("gone", 5i32), Ok(5));
    }

    #[test]
    fn missing_ext_is_reported() {
        let cmd = Command::request(34, crate::command::Encoding::Json);
        assert_eq!(ext_or_err(&cmd), Err(HeaderError::NoExt));
    }
}
