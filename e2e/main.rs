//! e2e tests.
