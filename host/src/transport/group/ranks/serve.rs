//! A serving rank's side: rank 0's commands run on this rank's members, each answered once
//! under its number, until rank 0 says to finish.
//!
//! Every command works on the members' memory while they are idle: rank 0 holds every
//! reply of theirs and sends them nothing while a command runs. Rank 0 going away ends the
//! job (`mpirun`), and rank 0 stopped ends it at the deadline (this rank's post office hears
//! no heartbeat): waiting here needs no deadline of its own.

use std::time::Duration;

use super::collectives::{self, Scratch};
use super::control::{decode, encode, FromRank, ToRank};
use super::failure::RankFailure;
use super::{fill, local, moves};
use crate::instance::{Instances, Mpi};
use crate::transport::tunnel::PostOffice;
use crate::transport::{Liveness, Served, SharedMemory};

/// Answers rank 0's commands on `served` (this rank's members, in order) until it says to
/// finish; returns the number of that message. `Err` only when an answer cannot be posted
/// (the office has stopped).
pub(crate) fn answer_commands(
    mpi: &Mpi,
    office: &PostOffice,
    served: &mut [Served],
) -> Result<u64, std::io::Error> {
    let answer = |number: u64, message: &FromRank| office.send_control(0, encode(number, message));
    let mut scratch = Scratch::default();
    loop {
        let Some((from, bytes)) = office.next_control(Duration::from_secs(1)) else {
            continue;
        };
        let (number, command) = match decode::<ToRank>(&bytes) {
            Some((number, ToRank::Finish)) => return Ok(number),
            Some((number, ToRank::Liveness(index))) => {
                let liveness = served.get(index).map_or(Liveness::Ended, Served::liveness);
                answer(number, &FromRank::Liveness(liveness))?;
                continue;
            }
            Some(numbered) => numbered,
            None => {
                // Answered, so that rank 0 does not wait for it (it cannot be matched to a
                // number: rank 0 drops it as stale and times out on the command).
                tracing::warn!(from, "an unknown control message");
                answer(0, &FromRank::Failed(RankFailure::Unknown))?;
                continue;
            }
        };
        let mut memories: Vec<Option<&mut SharedMemory>> =
            served.iter_mut().map(|device| device.memory()).collect();
        // The office sleeps while this rank moves bytes itself (not for copies between
        // ranks, whose bytes it carries).
        let hush = match command {
            ToRank::Collective(_) | ToRank::InSets(_) | ToRank::Fill(_) => Some(office.hush()),
            _ => None,
        };
        let outcome = match command {
            ToRank::Collective(part) => collectives::run(mpi, &part, &mut memories, &mut scratch),
            ToRank::InSets(part) => local::run(&part, &mut memories),
            ToRank::Moves(list) => moves::run(
                mpi.rank(),
                office,
                number,
                &list,
                &mut memories,
                mpi.deadline(),
            ),
            ToRank::Fill(part) => fill::run(&part, &mut memories),
            // Taken above, before the memory is borrowed.
            ToRank::Finish | ToRank::Liveness(_) => Ok(()),
        };
        drop(hush);
        answer(
            number,
            &match outcome {
                Ok(()) => FromRank::Done,
                Err(failure) => FromRank::Failed(failure),
            },
        )?;
    }
}
