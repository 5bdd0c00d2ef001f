//! The SQL functions over `base62`: `idgen_base62(bigint) → text` and
//! `idgen_base62_decode(text) → bigint`. Immutable, strict and parallel
//! safe, so a generated column can use them, and they need no preloaded
//! library.

use crate::base62::{self, Base62Error};
use crate::errors::IdgenError;
use pgrx::prelude::*;

fn raise(e: Base62Error, input: &str) -> ! {
    IdgenError::BadBase62 {
        input: input.to_string(),
        problem: e,
    }
    .raise()
}

/// `idgen_base62(id)`: the short code of a non-negative ID.
#[pg_extern(immutable, strict, parallel_safe)]
fn idgen_base62(id: i64) -> String {
    base62::encode(id).unwrap_or_else(|e| raise(e, &id.to_string()))
}

/// `idgen_base62_decode(code)`: the ID a short code stands for.
#[pg_extern(immutable, strict, parallel_safe)]
fn idgen_base62_decode(code: &str) -> i64 {
    base62::decode(code).unwrap_or_else(|e| raise(e, code))
}
