//! Elsewhere (and with the `portable` feature): no shared records. Keys and
//! file names are built as everywhere; opening refuses.

use std::io;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use super::{Key, ShmError};
use crate::clock::Nanos;
use crate::record::Record;
use crate::store::{Published, Store};

/// Nothing to remove: this build makes no files.
pub fn sweep() {}

/// Without shared records no mapped record can exist (see the module doc):
/// [`MappedRecord::open`] refuses, and the other methods, which need a
/// value, are never reached.
pub enum MappedRecord {}

impl MappedRecord {
    /// Refuses: this build has no shared records.
    pub fn open(_key: &Key, _path: &Path, _seed: u64, _stop: &AtomicBool) -> Result<Self, ShmError> {
        let platform = if cfg!(feature = "portable") {
            "by this build (CIRCUIT_BREAKER_PORTABLE=1: the code paths of systems other than Linux)".to_owned()
        } else {
            format!("on {}", std::env::consts::OS)
        };
        Err(ShmError::Unsupported { platform })
    }

    pub fn hold_lock_for_test(&self, _ms: u64) -> io::Result<()> {
        match *self {}
    }

    pub fn slots(&self) -> crate::slots::Slots<'_> {
        match *self {}
    }
}

impl Store for MappedRecord {
    type Guard<'a> = Guard<'a>;

    fn try_lock(&self) -> io::Result<Option<Guard<'_>>> {
        match *self {}
    }

    fn lock_within(&self, _wait: Nanos, _stop: &AtomicBool) -> io::Result<Option<Guard<'_>>> {
        match *self {}
    }

    fn published(&self) -> &Published {
        match *self {}
    }
}

/// Never held without shared records (see [`MappedRecord`]).
pub struct Guard<'a> {
    mapped: &'a MappedRecord,
}

impl std::ops::Deref for Guard<'_> {
    type Target = Record;
    fn deref(&self) -> &Record {
        match *self.mapped {}
    }
}

impl std::ops::DerefMut for Guard<'_> {
    fn deref_mut(&mut self) -> &mut Record {
        match *self.mapped {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::WindowSpec;

    #[test]
    fn opening_a_shared_record_is_refused_naming_the_option_and_the_platform() {
        let spec = WindowSpec::Count { size: 10, slow_threshold_ms: 800.0 };
        let key = Key { namespace: b"app", name: b"payments", config_hash: 1, spec: &spec };
        let path = key.path().expect("a short name has a path");
        match MappedRecord::open(&key, &path, 0, &AtomicBool::new(false)) {
            Err(e @ ShmError::Unsupported { .. }) => {
                let m = e.to_string();
                assert!(m.starts_with("shared: is not supported "), "{m}");
                assert!(m.contains("docs/install.md"), "{m}");
            }
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("opened without shared records"),
        }
        assert!(!path.exists(), "nothing is created");
    }
}

/// No shared records, so no host doorbell: a failure waits for the
/// sender's slot (docs/fleet.md, "When a host sends").
#[derive(Debug)]
pub struct Doorbell;

impl Doorbell {
    pub fn host() -> Option<&'static Doorbell> {
        None
    }
    pub fn load(&self) -> u32 {
        0
    }
    pub fn rings(word: u32) -> u32 {
        word
    }
    pub fn arm(&self) {}
    pub fn ring(&self) -> bool {
        false
    }
    pub fn wake(&self) {}
    pub fn wait(&self, _seen: u32, _timeout: std::time::Duration) {}
}
