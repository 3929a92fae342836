//! ferroverbs workspace root: integration tests, examples, benchmarks.
