//! Stable hashing (the rules crate's [`Fnv`], re-exported) and
//! [`hash_layout!`] for the structs this crate stores in shared files (the
//! record, the published words, a file's header), next to each struct.

pub use circuit_breaker_rules::hashing::*;

/// As `circuit_breaker_rules::hashing`'s `hash_layout!`, for this crate's
/// stored structs: the same few lines, since a `macro_rules!` macro
/// reaches another crate only through `#[macro_export]`, at the crate
/// root; the work is in [`Fnv::type_of`] and [`Fnv::field`], shared. The
/// field list must be whole: a field added to the struct and not to the
/// list fails to compile.
macro_rules! hash_layout {
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
