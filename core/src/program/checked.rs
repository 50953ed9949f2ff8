//! A program checked for a number of replicas, with the facts the check established ready
//! to read: each stream's item, each variable's element count, the model's output width,
//! each anchor's width. Code that holds a [`Checked`] reads these as plain numbers instead
//! of looking them up again with a fallible call and a default nobody meant.
//!
//! # Rules
//!
//! - A [`Checked`] is made only by [`Program::checked`], which runs [`Program::check`] for
//!   the replicas and computes every fact with checked arithmetic: a count that would
//!   overflow is the check's own [`ProgramRule::Size`] error. Nothing else builds one, so
//!   whoever holds one holds a program that passed the check for exactly those replicas.
//! - The facts lie beside the program, indexed as its streams and variables are
//!   ([`Checked::items`], [`Checked::sizes`]): read them by zipping, not by looking up.
//!
//! Nothing here allocates or panics.

use heapless::Vec;

use super::{
    elements, AnchorTensor, Program, ProgramError, ProgramRule, MAX_STREAMS, MAX_VARIABLES,
};

/// A program checked for a number of replicas (module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    program: Program,
    replicas: usize,
    /// Elements of one FIFO item of each stream (a micro-batch of samples), by stream.
    items: Vec<usize, MAX_STREAMS>,
    /// Elements of each variable on one replica, before sharding, by variable.
    sizes: Vec<usize, MAX_VARIABLES>,
    /// Elements of one sample of the model's output.
    output: usize,
}

impl Program {
    /// This program, checked for `replicas` replicas ([`Program::check`]), with the facts
    /// the check established (module doc).
    pub fn checked(self, replicas: usize) -> Result<Checked, ProgramError> {
        self.check(replicas)?;
        let micro = self.micro_batch_size as usize;
        let mut items = Vec::new();
        for s in &self.streams {
            let size = ProgramError::Stream {
                name: s.name.clone(),
                rule: ProgramRule::Size,
            };
            let item = elements(&s.sample).and_then(|e| e.checked_mul(micro));
            // At most MAX_STREAMS streams, as the program holds.
            let _ = items.push(item.ok_or(size)?);
        }
        let mut sizes = Vec::new();
        for v in &self.variables {
            let n =
                elements(&v.shape).ok_or_else(|| ProgramError::variable(v, ProgramRule::Size))?;
            let _ = sizes.push(n);
        }
        let output = self
            .output_width()
            .filter(|w| w.checked_mul(micro).is_some())
            .ok_or(ProgramError::NoInput { index: self.input })?;
        Ok(Checked {
            program: self,
            replicas,
            items,
            sizes,
            output,
        })
    }
}

impl Checked {
    /// The program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The replicas it was checked for.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// Elements of one FIFO item of each stream, indexed as the program's streams.
    pub fn items(&self) -> &[usize] {
        &self.items
    }

    /// Elements of each variable on one replica, before sharding, indexed as the program's
    /// variables.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    /// Elements of one sample of the model's output (the loss layer's input).
    pub fn output_width(&self) -> usize {
        self.output
    }

    /// Elements of one value of anchored `tensor`: a micro-batch's losses, or outputs.
    pub fn anchor_width(&self, tensor: AnchorTensor) -> usize {
        let micro = self.program.micro_batch_size as usize;
        match tensor {
            AnchorTensor::Loss => micro,
            // Checked not to overflow when made.
            AnchorTensor::Output => self.output * micro,
        }
    }

    /// The program, given back.
    pub fn into_program(self) -> Program {
        self.program
    }
}

impl core::ops::Deref for Checked {
    type Target = Program;

    fn deref(&self) -> &Program {
        &self.program
    }
}
