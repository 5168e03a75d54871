//! Stable hashing: FNV-1a over values and over the layout of the structs a
//! shared file holds. At the bottom of the crate: the configuration's
//! fingerprint (config.rs) and every stored struct's `layout` function
//! (next to the struct, with `hash_layout!`) build on it, and it imports
//! nothing.

use std::mem::{align_of, size_of};

/// Hashes values (FNV-1a): equal inputs hash the same in every process and
/// build.
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    /// Goes on from an earlier hash.
    pub fn from_hash(hash: u64) -> Self {
        Self(hash)
    }

    /// Adds the bytes of one value.
    pub fn bytes(mut self, bytes: &[u8]) -> Self {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self
    }

    /// Adds a float by its bits.
    pub fn f64(self, x: f64) -> Self {
        self.bytes(&x.to_bits().to_le_bytes())
    }

    /// Adds an integer.
    pub fn i64(self, x: i64) -> Self {
        self.bytes(&x.to_le_bytes())
    }

    /// Adds a size or an offset.
    pub fn usize(self, x: usize) -> Self {
        self.bytes(&(x as u64).to_le_bytes())
    }

    /// Adds a string, length first (so that "ab"+"c" and "a"+"bc" differ).
    pub fn text(self, s: &[u8]) -> Self {
        self.usize(s.len()).bytes(s)
    }

    /// The hash.
    pub fn finish(self) -> u64 {
        self.0
    }
}

impl Fnv {
    /// Adds a type's name, size and alignment (what [`hash_layout!`] adds
    /// for an enum, and first for a struct).
    pub fn type_of<T>(self) -> Self {
        self.text(std::any::type_name::<T>().as_bytes()).usize(size_of::<T>()).usize(align_of::<T>())
    }

    /// Adds one field of the struct at `base`, at `field`: its name,
    /// offset, size and type (for [`hash_layout!`]). Only the addresses
    /// are used; nothing is read.
    pub fn field<T, F>(self, name: &str, base: *const T, field: *const F) -> Self {
        self.text(name.as_bytes())
            .usize(field as usize - base as usize)
            .usize(size_of::<F>())
            .text(std::any::type_name::<F>().as_bytes())
    }
}

/// Adds a `repr(C)` struct's name, size and alignment, and each field's
/// name, offset, size and type, to a [`Fnv`]; `enum T` adds an enum's
/// name, size and alignment. Used by the `layout` function next to each
/// struct stored in a shared file. The field list must be whole: a field
/// added to the struct and not to the list fails to compile.
///
/// The core crate, whose own stored structs (the record, its header) need
/// it too, has the same few lines (`circuit_breaker_core::hashing`): a
/// `macro_rules!` macro reaches another crate only through
/// `#[macro_export]`, which puts it at the crate root; the work is in
/// [`Fnv::type_of`] and [`Fnv::field`], shared.
macro_rules! hash_layout {
    ($h:expr, enum $t:ty) => {
        $h.type_of::<$t>()
    };
    ($h:expr, $t:path { $($f:ident),* $(,)? }) => {{
        // Exhaustive on purpose (no `..`): a new field must be listed.
        #[allow(dead_code)]
        fn whole(v: &$t) {
            let $t { $($f: _),* } = v;
        }
        let value = ::std::mem::MaybeUninit::<$t>::uninit();
        let base = value.as_ptr();
        let h = $h.type_of::<$t>();
        $(
            // SAFETY: `addr_of!` on a field of an uninitialised value only
            // computes its address; nothing is read.
            let h = h.field(stringify!($f), base, unsafe { ::std::ptr::addr_of!((*base).$f) });
        )*
        h
    }};
}
pub(crate) use hash_layout;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_differ_with_values() {
        let a = Fnv::default().f64(0.5).i64(20).finish();
        assert_eq!(a, Fnv::default().f64(0.5).i64(20).finish());
        assert_ne!(a, Fnv::default().f64(0.5).i64(21).finish());
    }
}
