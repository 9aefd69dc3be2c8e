//! Status codes of the C ABI and the crate's error type.
use std::fmt;

/// Mirror of `enum fh_status` (values stable across versions); `Other` keeps a code that a
/// newer library may return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    Ok,
    NullPointer,
    StructSize,
    BadDimension,
    Indivisible,
    BadValue,
    NonFinite,
    OutOfRange,
    NoBatch,
    UnknownName,
    BufferSize,
    Io,
    CheckpointTruncated,
    CheckpointCorrupt,
    CheckpointConfig,
    NoCuda,
    Cuda,
    OutOfMemory,
    Internal,
    Unsupported,
    Other(i32),
}

const NAMES: [(Status, &str); 20] = [
    (Status::Ok, "FH_OK"),
    (Status::NullPointer, "FH_ERR_NULL_POINTER"),
    (Status::StructSize, "FH_ERR_STRUCT_SIZE"),
    (Status::BadDimension, "FH_ERR_BAD_DIMENSION"),
    (Status::Indivisible, "FH_ERR_INDIVISIBLE"),
    (Status::BadValue, "FH_ERR_BAD_VALUE"),
    (Status::NonFinite, "FH_ERR_NON_FINITE"),
    (Status::OutOfRange, "FH_ERR_OUT_OF_RANGE"),
    (Status::NoBatch, "FH_ERR_NO_BATCH"),
    (Status::UnknownName, "FH_ERR_UNKNOWN_NAME"),
    (Status::BufferSize, "FH_ERR_BUFFER_SIZE"),
    (Status::Io, "FH_ERR_IO"),
    (Status::CheckpointTruncated, "FH_ERR_CHECKPOINT_TRUNCATED"),
    (Status::CheckpointCorrupt, "FH_ERR_CHECKPOINT_CORRUPT"),
    (Status::CheckpointConfig, "FH_ERR_CHECKPOINT_CONFIG"),
    (Status::NoCuda, "FH_ERR_NO_CUDA"),
    (Status::Cuda, "FH_ERR_CUDA"),
    (Status::OutOfMemory, "FH_ERR_OUT_OF_MEMORY"),
    (Status::Internal, "FH_ERR_INTERNAL"),
    (Status::Unsupported, "FH_ERR_UNSUPPORTED"),
];

impl Status {
    pub fn from_code(code: i32) -> Status {
        if (0..NAMES.len() as i32).contains(&code) {
            NAMES[code as usize].0
        } else {
            Status::Other(code)
        }
    }

    pub fn code(self) -> i32 {
        match self {
            Status::Other(c) => c,
            s => NAMES.iter().position(|(n, _)| *n == s).unwrap() as i32,
        }
    }

    /// The C enumerator's name, e.g. `"FH_ERR_NON_FINITE"`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Other(_) => "FH_STATUS_UNKNOWN",
            s => NAMES[s.code() as usize].1,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Other(c) => write!(f, "FH_STATUS_{}", c),
            s => f.write_str(s.name()),
        }
    }
}

/// Everything that can go wrong.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// A foxhunt call returned a status other than FH_OK; `message` is the library's
    /// `fh_last_error_message()`.
    Foxhunt { status: Status, message: String },
    /// The shared library could not be loaded, or a symbol is missing.
    Load(String),
    /// The loaded library is not the version this crate was written for.
    Version {
        found: (u32, u32, u32),
        expected: (u32, u32),
    },
    /// An argument was refused before calling the library (slice length, NUL in a name).
    Argument(String),
}

impl Error {
    /// The library's status, for errors that came from the library.
    pub fn status(&self) -> Option<Status> {
        match self {
            Error::Foxhunt { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Error::Foxhunt { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Foxhunt { status, message } => write!(f, "{}: {}", status, message),
            Error::Load(m) => write!(f, "cannot load libfoxhunt: {}", m),
            Error::Version { found, expected } => write!(
                f,
                "libfoxhunt {}.{}.{} is loaded, but this crate was written for {}.{}",
                found.0, found.1, found.2, expected.0, expected.1
            ),
            Error::Argument(m) => write!(f, "invalid argument: {}", m),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
