//! Shared helpers for the end-to-end suites in `tests/`.
