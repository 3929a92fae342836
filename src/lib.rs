//! ferroverbs workspace root: integration tests, examples, benchmarks, and the
//! `ferroverbs` command-line tool ([`cli`]).

pub mod cli;
