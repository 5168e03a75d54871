//! Where one breaker's record is, as one [`Store`]: this process's memory
//! ([`HeapStore`]) or a file every process of the host maps
//! ([`MappedRecord`], `shared:`). The binding holds a `Place` and never
//! asks which; only the file's path and the tests' lock hook differ.

use std::io;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use crate::clock::Nanos;
use crate::record::Record;
use crate::shm::{self, MappedRecord};
use crate::slots::Slots;
use crate::store::{HeapGuard, HeapStore, Published, Store};

/// A record's place.
pub enum Place {
    /// This process's memory.
    Heap(HeapStore),
    /// A file mapped by every process that opens the same key, at `path`.
    Mapped { record: MappedRecord, path: PathBuf },
}

/// A record held in either place; dropping it gives the lock back.
pub enum PlaceGuard<'a> {
    Heap(HeapGuard<'a>),
    Mapped(shm::Guard<'a>),
}

impl Deref for PlaceGuard<'_> {
    type Target = Record;
    #[inline]
    fn deref(&self) -> &Record {
        match self {
            PlaceGuard::Heap(g) => g,
            PlaceGuard::Mapped(g) => g,
        }
    }
}

impl DerefMut for PlaceGuard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Record {
        match self {
            PlaceGuard::Heap(g) => g,
            PlaceGuard::Mapped(g) => g,
        }
    }
}

impl Store for Place {
    type Guard<'a> = PlaceGuard<'a>;

    #[inline]
    fn try_lock(&self) -> io::Result<Option<PlaceGuard<'_>>> {
        Ok(match self {
            Place::Heap(s) => s.try_lock()?.map(PlaceGuard::Heap),
            Place::Mapped { record, .. } => record.try_lock()?.map(PlaceGuard::Mapped),
        })
    }

    fn lock_within(&self, wait: Nanos, stop: &AtomicBool) -> io::Result<Option<PlaceGuard<'_>>> {
        Ok(match self {
            Place::Heap(s) => s.lock_within(wait, stop)?.map(PlaceGuard::Heap),
            Place::Mapped { record, .. } => record.lock_within(wait, stop)?.map(PlaceGuard::Mapped),
        })
    }

    #[inline]
    fn published(&self) -> &Published {
        match self {
            Place::Heap(s) => s.published(),
            Place::Mapped { record, .. } => record.published(),
        }
    }
}

impl Place {
    /// The shared file, if the record is in one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Place::Heap(_) => None,
            Place::Mapped { path, .. } => Some(path),
        }
    }

    /// The slots of the breaker's cap: this process's, or the host's for a
    /// record in a shared file (docs/concurrency.md).
    #[inline]
    pub fn slots(&self) -> Slots<'_> {
        match self {
            Place::Heap(s) => Slots::heap(s.published().in_flight()),
            Place::Mapped { record, .. } => record.slots(),
        }
    }

    /// Whether the record is in a file every process of the host maps.
    pub fn is_mapped(&self) -> bool {
        matches!(self, Place::Mapped { .. })
    }

    /// Holds the lock of a shared record for `ms`, doing nothing (tests);
    /// nothing for a record in memory.
    pub fn hold_lock_for_test(&self, ms: u64) -> io::Result<()> {
        match self {
            Place::Heap(_) => Ok(()),
            Place::Mapped { record, .. } => record.hold_lock_for_test(ms),
        }
    }
}
