/work/main/tests/bench/ceiling/target/release/deps/smallvec-80a8d7a69087bb62.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/smallvec-1.16.6/src/lib.rs

/work/main/tests/bench/ceiling/target/release/deps/libsmallvec-80a8d7a69087bb62.rlib: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/smallvec-1.16.6/src/lib.rs

/work/main/tests/bench/ceiling/target/release/deps/libsmallvec-80a8d7a69087bb62.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/smallvec-1.16.6/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/smallvec-1.16.6/src/lib.rs:
