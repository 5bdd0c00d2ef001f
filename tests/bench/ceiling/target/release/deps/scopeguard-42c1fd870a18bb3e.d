/work/main/tests/bench/ceiling/target/release/deps/scopeguard-42c1fd870a18bb3e.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/scopeguard-1.2.0/src/lib.rs

/work/main/tests/bench/ceiling/target/release/deps/libscopeguard-42c1fd870a18bb3e.rlib: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/scopeguard-1.2.0/src/lib.rs

/work/main/tests/bench/ceiling/target/release/deps/libscopeguard-42c1fd870a18bb3e.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/scopeguard-1.2.0/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/scopeguard-1.2.0/src/lib.rs:
