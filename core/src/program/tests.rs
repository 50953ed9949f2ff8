//! Unit tests of the program rules.
