//! One `key=value` line of a broker.conf, and the readers of its value that the keys share:
//! each returns the value or a `ConfigError` naming the line, the key and what is allowed.

use std::net::IpAddr;
use std::path::PathBuf;

use super::ConfigError;

pub(super) struct Field<'a> {
    pub(super) line: usize,
    /// As the file spells it, which may be an older spelling of the key.
    pub(super) key: &'a str,
    pub(super) value: &'a str,
}

impl Field<'_> {
    pub(super) fn invalid(&self, allowed: &str) -> ConfigError {
        ConfigError {
            line: self.line,
            key: self.key.to_string(),
            value: self.value.to_string(),
            allowed: allowed.to_string(),
        }
    }

    pub(super) fn number<T>(&self, min: T, max: T) -> Result<T, ConfigError>
    where
        T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
    {
        match self.value.parse::<T>() {
            Ok(parsed) if parsed >= min && parsed <= max => Ok(parsed),
            _ => Err(self.invalid(&format!("a whole number from {min} to {max}"))),
        }
    }

    pub(super) fn boolean(&self) -> Result<bool, ConfigError> {
        match self.value.to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(self.invalid("true or false")),
        }
    }

    pub(super) fn ip(&self) -> Result<IpAddr, ConfigError> {
        self.value
            .parse()
            .map_err(|_| self.invalid("an IPv4 or IPv6 address"))
    }

    pub(super) fn path(&self) -> Result<PathBuf, ConfigError> {
        if self.value.is_empty() {
            return Err(self.invalid("a non-empty path"));
        }
        Ok(PathBuf::from(self.value))
    }

    /// A cluster or broker name.
    pub(super) fn name(&self) -> Result<String, ConfigError> {
        let ok = !self.value.is_empty()
            && self.value.len() <= 127
            && self
                .value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '%' || c == '|');
        if ok {
            Ok(self.value.to_string())
        } else {
            Err(self.invalid("1 to 127 characters of [A-Za-z0-9_-%|]"))
        }
    }

    /// A topic name, as topics are checked when created.
    pub(super) fn topic(&self, value: &str, allowed: &str) -> Result<String, ConfigError> {
        crate::topic::validate_topic_name(value)
            .map_err(|error| self.invalid(&format!("{allowed} ({error})")))?;
        Ok(value.to_string())
    }

    /// One of the `(text, value)` choices, by exact text.
    pub(super) fn one_of<T: Copy>(&self, choices: &[(&str, T)]) -> Result<T, ConfigError> {
        match choices.iter().find(|(text, _)| *text == self.value) {
            Some((_, value)) => Ok(*value),
            None => {
                let texts: Vec<&str> = choices.iter().map(|(text, _)| *text).collect();
                Err(self.invalid(&format!("one of {}", texts.join(", "))))
            }
        }
    }

    pub(super) fn delete_when(&self) -> Result<String, ConfigError> {
        let hours: Result<Vec<u32>, _> = self
            .value
            .split(';')
            .map(|h| h.trim().parse::<u32>())
            .collect();
        match hours {
            Ok(hours) if !hours.is_empty() && hours.iter().all(|h| *h < 24) => {
                Ok(self.value.to_string())
            }
            _ => Err(self.invalid("hours of the day 00 to 23, separated by ';'")),
        }
    }
}
