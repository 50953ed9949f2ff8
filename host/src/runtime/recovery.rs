//! What a failed training step leaves behind, and the way back to a defined state.
//!
//! # Rule
//!
//! A step goes through three phases, and a failure in each leaves a different state:
//!
//! 1. **Feeding** — each replica's inputs are pushed to its stream FIFOs. No device has
//!    run anything of the step: every variable is as it was. (Inputs moved in place are
//!    counted by the device's `RunStep` instead, so a device refusing them fails the step
//!    while running, when another may have run a batch.) A device runs one replica or
//!    several as its lanes: whatever fails on it fails every lane of it.
//! 2. **Running** — the devices run the step and the host combines their reductions. A
//!    failure here (a device error, a silent or lost device, a refused reduction) can come
//!    after some replicas applied a batch's update that others never got: the replicas of
//!    one group may now hold different weights and optimizer state, which nothing on the
//!    host would notice (one replica per group is read back and saved).
//! 3. **Collecting** — every device finished the step and the anchors are read. The
//!    variables are the step's result on every replica; only the anchors are lost.
//!
//! (The anchors of the step before, read in place, are reported by this step's `RunStep`
//! (`took`): a device refusing that report fails the step while running too. So does a
//! device that ends the step without every anchor FIFO holding exactly its ring — a
//! broken device, whose anchors the host would otherwise read in place — though it
//! applied every update: the runtime cannot tell which replicas did.)
//!
//! After a failure in any phase the runtime sends every device
//! [`ResetStep`](tessera_core::wire::ProgramRequest::ResetStep): stream and anchor FIFOs emptied,
//! the step's scratch (where `Sum` anchors accumulate) zeroed, so nothing of the failed
//! step reaches the next one. A device that cannot be reset (its link is gone) is tried
//! again before the next step, which fails if it still cannot.
//!
//! After a failure while **running**, the runtime is *diverged*: [`Runtime::run`],
//! [`Runtime::run_with`], [`Runtime::weights_to_host`] and
//! [`Runtime::optimizer_state_to_host`] refuse with [`RuntimeError::Diverged`], naming a
//! variable still to load, until every variable has been loaded again with
//! [`Runtime::weights_from_host`] and, when the optimizer keeps a velocity, every velocity
//! with [`Runtime::optimizer_state_from_host`] (resuming a checkpoint does both). Loads may
//! come in any number of calls; each clears what it wrote. The runtime never guesses which
//! replica holds the right values: only the host's copy is known good.
//!
//! A device whose link is gone for good (its process killed, its link closed: a failure
//! no reset can mend) is **lost**, and with it the runtime: a device's program, variables
//! and FIFOs live on it, and nothing brings it back. The failed step's error says so, and
//! every later call that would reach the devices — a step, a load, a read, the seed —
//! refuses with [`RuntimeError::DeviceLost`], before the advice to load the weights again
//! (which could not help): prepare a new runtime, then load its weights or resume a
//! checkpoint. [`Runtime::lost`] tells whether a runtime is lost.
//!
//! The replicas' RNG states and cycle counts stay as the failed step left them (each
//! replica draws its own stream, so they cannot disagree within a group); set the RNG
//! state with [`Runtime::set_rng_state`] to repeat a step exactly.
//!
//! [`StepFault`] makes one device fail a step at a chosen round, on any placement, to test
//! the rule ([`Runtime::inject_step_fault`]).
//!
//! [`Runtime::run`]: super::Runtime::run
//! [`Runtime::run_with`]: super::Runtime::run_with
//! [`Runtime::weights_to_host`]: super::Runtime::weights_to_host
//! [`Runtime::optimizer_state_to_host`]: super::Runtime::optimizer_state_to_host
//! [`Runtime::weights_from_host`]: super::Runtime::weights_from_host
//! [`Runtime::optimizer_state_from_host`]: super::Runtime::optimizer_state_from_host
//! [`Runtime::set_rng_state`]: super::Runtime::set_rng_state
//! [`Runtime::inject_step_fault`]: super::Runtime::inject_step_fault

use std::collections::BTreeSet;
use std::fmt;

use tessera_core::wire::{ProgramRequest, Request};

use super::{Runtime, RuntimeError};
use crate::transport::TransportError;

/// One device failing a training step at a chosen reduction round, on any placement: the
/// host answers the contribution of `replica`'s device (all of its lanes, when it runs
/// several: [`Runtime::devices`]) to round `round` of the step (its exchanges, numbered
/// across the step's batches as the devices number them: [`Runtime::rounds_per_step`]) one
/// element short, which the device refuses ([`ErrorCode::UnexpectedReduced`]) and fails
/// its step there, while its peers have the round's answer and go on.
///
/// [`ErrorCode::UnexpectedReduced`]: tessera_core::wire::ErrorCode::UnexpectedReduced
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepFault {
    /// The global replica that fails.
    pub replica: u32,
    /// The round it fails at.
    pub round: u32,
}

/// What a step was doing when it failed (see the module's rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepPhase {
    /// Pushing the replicas' inputs.
    Feeding,
    /// Running on the devices and combining their reductions.
    Running,
    /// Reading the anchors back.
    Collecting,
}

impl fmt::Display for StepPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Feeding => "feeding the replicas' inputs",
            Self::Running => "running on the devices",
            Self::Collecting => "reading the anchors",
        })
    }
}

/// The runtime's memory of failed steps: what must be loaded again, and whether the
/// devices still need a reset.
#[derive(Debug, Default)]
pub(super) struct Recovery {
    /// Variables (by index) whose replicas may disagree, until loaded again.
    weights: BTreeSet<usize>,
    /// Velocities (by variable index) likewise.
    velocities: BTreeSet<usize>,
    /// The last reset did not reach every device.
    reset_pending: bool,
    /// The first device found lost (its replica) and why: the runtime cannot run again.
    lost: Option<(u32, String)>,
}

impl Recovery {
    /// Variable `index`'s weights were loaded from the host on every replica.
    pub(super) fn weights_loaded(&mut self, index: usize) {
        self.weights.remove(&index);
    }

    /// Variable `index`'s velocity was loaded from the host on every replica.
    pub(super) fn velocity_loaded(&mut self, index: usize) {
        self.velocities.remove(&index);
    }
}

impl Runtime {
    /// Refuses while a failed step left variables (`weights`) or their velocities
    /// (`velocities`) that may differ between replicas (see the module's rule).
    pub(super) fn check_converged(
        &self,
        weights: bool,
        velocities: bool,
    ) -> Result<(), RuntimeError> {
        self.check_alive()?;
        let diverged = |set: &BTreeSet<usize>, what| {
            set.iter().next().map(|&i| RuntimeError::Diverged {
                name: self.program.variables[i].name.to_string(),
                what,
            })
        };
        let first = weights
            .then(|| diverged(&self.recovery.weights, "weights"))
            .flatten()
            .or_else(|| {
                velocities
                    .then(|| diverged(&self.recovery.velocities, "optimizer state"))
                    .flatten()
            });
        first.map_or(Ok(()), Err)
    }

    /// Refuses once a device is lost (see the module's rule): before anything is sent, and
    /// before any other advice.
    pub(super) fn check_alive(&self) -> Result<(), RuntimeError> {
        match &self.recovery.lost {
            None => Ok(()),
            Some((replica, cause)) => Err(RuntimeError::DeviceLost {
                replica: *replica,
                cause: cause.clone(),
            }),
        }
    }

    /// The device (its first replica) lost by a failure no reset can mend, if one was: then
    /// this runtime cannot run again, and a new one must be prepared (module rule).
    pub fn lost(&self) -> Option<u32> {
        self.recovery.lost.as_ref().map(|(replica, _)| *replica)
    }

    /// What a step must find before it sends anything: no divergence left, and devices
    /// whose step state a failure left behind reset.
    pub(super) fn ready_for_step(&mut self) -> Result<(), RuntimeError> {
        self.check_converged(true, true)?;
        if self.recovery.reset_pending {
            self.reset_devices()?;
        }
        Ok(())
    }

    /// Applies the module's rule to a step that failed with `cause` while `phase`, and
    /// returns the error the caller reports.
    pub(super) fn step_failed(&mut self, phase: StepPhase, cause: RuntimeError) -> RuntimeError {
        let diverged = phase == StepPhase::Running;
        if diverged {
            let all = 0..self.program.variables.len();
            self.recovery.weights.extend(all.clone());
            if self.program.optimizer.has_velocity() {
                self.recovery.velocities.extend(all);
            }
        }
        tracing::warn!(%phase, error = %cause, diverged, "step failed: resetting the devices");
        let reset = self.reset_devices().err();
        RuntimeError::StepFailed {
            phase,
            cause: Box::new(cause),
            diverged,
            reset,
            lost: self.lost(),
        }
    }

    /// Sends `ResetStep` to every device (each after whatever step it may still be in);
    /// remembers a failure so that the next step tries again.
    fn reset_devices(&mut self) -> Result<(), TransportError> {
        // A device reset has no anchors left to report; one that could not be reset is
        // reset before the next step runs, or that step fails.
        self.anchors_taken.fill(false);
        let mut first = None;
        for c in &mut self.channels {
            if let Err(e) = c.request_after_abandoned(&Request::Program(ProgramRequest::ResetStep))
            {
                tracing::warn!(replica = c.replica(), error = %e, "device not reset");
                if e.link_gone() && self.recovery.lost.is_none() {
                    self.recovery.lost = Some((c.replica(), e.to_string()));
                }
                first.get_or_insert(e);
            }
        }
        self.recovery.reset_pending = first.is_some();
        first.map_or(Ok(()), Err)
    }
}
