/work/main/tests/bench/ceiling/target/release/deps/smallvec-79b0463c49d0c418.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/smallvec-1.16.6/src/lib.rs

/work/main/tests/bench/ceiling/target/release/deps/libsmallvec-79b0463c49d0c418.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/smallvec-1.16.6/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/smallvec-1.16.6/src/lib.rs:
