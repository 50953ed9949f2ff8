//! Replica groupings and the variable settings built on them.
//!
//! A variable on a replicated accelerator is either one value shared by all replicas or one
//! value per *group* of replicas. [`ReplicaGrouping`] says which replicas form each group,
//! [`CommGroup`] is the named form users usually write, and [`VariableSettings`] adds how
//! the value is returned to the host ([`RetrievalMode`]) and the shapes that follow.
//!
//! Each type's documentation states its rules: [`ReplicaGrouping`] the validity rule, the
//! replica ↔ (group, member) mapping, the transpose and the text form; [`CommGroup`] the
//! comm group ↔ grouping mapping; [`VariableSettings`] the host, returned and replica
//! shapes.
//!
//! Shapes have a fixed maximum rank ([`MAX_RANK`]) so that they live on the stack.
//!
//! # Panics
//!
//! Nothing in this module panics: every index is checked and reported as a
//! [`GroupingError`] or [`ShapeError`].

mod comm;
mod error;
mod replica;
mod settings;
mod shape;

pub use comm::CommGroup;
pub use error::GroupingError;
pub use replica::{Members, ReplicaGrouping};
pub use settings::{GroupingSpec, RetrievalMode, VariableSettings};
pub use shape::{Shape, ShapeError, MAX_RANK};
