//! One RemotingCommand, the request or response a frame carries, apart from how its header is
//! encoded: the frame and both header encodings read and write this one shape.

use bytes::Bytes;

use crate::ext::ExtFields;

/// `MQVersion.Version.V5_3_3` ordinal. Clients record the `version` of heartbeat responses as
/// the broker version and refuse SQL92 pulls below 232, so a real 5.x ordinal goes here.
pub const SERVER_VERSION: i32 = 479;

/// Bit 0 of `flag`: the command is a response.
pub const FLAG_RESPONSE: i32 = 1;
/// Bit 1 of `flag`: the request expects no response.
pub const FLAG_ONEWAY: i32 = 2;

/// How a command's header is (or will be) serialized.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    Json,
    RocketMq,
}

/// The sender's `LanguageCode`. The binary header carries the raw byte, JSON carries the name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LanguageCode(pub u8);

/// Names in ordinal order, as Java's `LanguageCode` enum declares them.
const LANGUAGE_NAMES: [&str; 14] = [
    "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP",
    "OMS", "RUST", "NODE_JS",
];

impl LanguageCode {
    pub const JAVA: LanguageCode = LanguageCode(0);
    pub const OTHER: LanguageCode = LanguageCode(7);
    pub const RUST: LanguageCode = LanguageCode(12);

    /// The Java enum name. Codes Java does not know are reported as `OTHER`, the closest
    /// name a JSON peer can still parse.
    pub fn name(self) -> &'static str {
        LANGUAGE_NAMES
            .get(usize::from(self.0))
            .copied()
            .unwrap_or("OTHER")
    }

    pub fn from_name(name: &str) -> Option<LanguageCode> {
        LANGUAGE_NAMES
            .iter()
            .position(|known| *known == name)
            .and_then(|index| u8::try_from(index).ok())
            .map(LanguageCode)
    }
}

/// One RemotingCommand: a request or a response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    pub code: i32,
    pub language: LanguageCode,
    pub version: i32,
    pub opaque: i32,
    pub flag: i32,
    pub remark: Option<String>,
    /// `None` means extFields is absent, which is not the same as `{}` for Java peers.
    pub ext: Option<ExtFields>,
    pub body: Bytes,
    pub encoding: Encoding,
}

impl Command {
    /// A request with language JAVA, version SERVER_VERSION, flag 0, opaque 0, empty body.
    pub fn request(code: i32, encoding: Encoding) -> Command {
        Command {
            code,
            language: LanguageCode::JAVA,
            version: SERVER_VERSION,
            opaque: 0,
            flag: 0,
            remark: None,
            ext: None,
            body: Bytes::new(),
            encoding,
        }
    }

    /// The response to `self`: same opaque and encoding, flag FLAG_RESPONSE, language JAVA,
    /// version SERVER_VERSION, ext None, empty body.
    pub fn response_to(&self, code: i32) -> Command {
        Command {
            code,
            language: LanguageCode::JAVA,
            version: SERVER_VERSION,
            opaque: self.opaque,
            flag: FLAG_RESPONSE,
            remark: None,
            ext: None,
            body: Bytes::new(),
            encoding: self.encoding,
        }
    }

    pub fn with_ext(mut self, ext: ExtFields) -> Command {
        self.ext = Some(ext);
        self
    }

    pub fn with_body(mut self, body: impl Into<Bytes>) -> Command {
        self.body = body.into();
        self
    }

    pub fn with_remark(mut self, remark: impl Into<String>) -> Command {
        self.remark = Some(remark.into());
        self
    }

    pub fn with_opaque(mut self, opaque: i32) -> Command {
        self.opaque = opaque;
        self
    }

    pub fn oneway(mut self) -> Command {
        self.flag |= FLAG_ONEWAY;
        self
    }

    pub fn is_response(&self) -> bool {
        self.flag & FLAG_RESPONSE != 0
    }

    pub fn is_oneway(&self) -> bool {
        self.flag & FLAG_ONEWAY != 0
    }

    pub fn ext_get(&self, key: &str) -> Option<&str> {
        self.ext.as_ref().and_then(|ext| ext.get(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn language_names_round_trip() {
        for code in 0..14u8 {
            let language = LanguageCode(code);
            assert_eq!(LanguageCode::from_name(language.name()), Some(language));
        }
        assert_eq!(LanguageCode::RUST.name(), "RUST");
        assert_eq!(LanguageCode(200).name(), "OTHER");
        assert_eq!(LanguageCode::from_name("COBOL"), None);
    }

    #[test]
    fn builders_set_flags() {
        let request = Command::request(15, Encoding::Json).with_opaque(9).oneway();
        assert!(request.is_oneway());
        assert!(!request.is_response());
        let response = request.response_to(0);
        assert!(response.is_response());
        assert_eq!(response.opaque, 9);
        assert_eq!(response.encoding, Encoding::Json);
    }
}
