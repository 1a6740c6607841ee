//! Data parallelism: one optimizer step on several devices ("workers") at once.
//!
//! Every worker holds a replica of the model and of the optimizer state, forked from the same
//! weights and the same state at the start (or resume) of a run. A step splits its batch into
//! one contiguous share per worker ([`shares`]); each worker runs the task on its share, scales
//! its loss by its share's weight ([`Task::loss_weight`]: the share's part of the batch's loss
//! terms, so that the scaled losses add up to the whole batch's mean loss), back-propagates,
//! and hands its gradients to **Burn's collective** (`burn::collective`, burn-optim's
//! `GradientsParams::all_reduce`), which sums them across the workers. Every worker then sees
//! the same reduced gradients: it takes their global norm, clips by it and applies the same
//! optimizer step, so the replicas stay equal without ever being copied again. Worker 0's
//! replica is the one the engine evaluates and checkpoints (one writer); the loss and correct
//! count of the step are summed across workers by the same collective.
//!
//! With one worker none of this runs: the step is the plain single-device step, bit for bit.
//!
//! The collective is a process-wide server per backend type, so one data-parallel run per
//! process runs at a time ([`Workers::start`] waits for the previous one to finish).
//!
//! [`Task::loss_weight`]: super::task::Task::loss_weight

use std::collections::BTreeSet;
use std::sync::{Barrier, Mutex, MutexGuard};

use burn::collective::{self, CollectiveConfig, PeerId, ReduceOperation};
use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::TensorPrimitive;

use super::config::TrainConfig;
use super::optim::{seed_everything, step_seed, Optim};
use super::task::{StepContext, Task};
use crate::clip::{clip_on_device, grad_norm_on_device};

/// The contiguous shares of `batch` for `workers` workers: sizes differ by at most one, the
/// first ones take the extra examples; a worker gets an empty share when the batch is smaller
/// than the number of workers.
pub fn shares(batch: &[usize], workers: usize) -> Vec<&[usize]> {
    let workers = workers.max(1);
    let base = batch.len() / workers;
    let extra = batch.len() % workers;
    let mut out = Vec::with_capacity(workers);
    let mut start = 0;
    for w in 0..workers {
        let len = base + usize::from(w < extra);
        out.push(&batch[start..start + len]);
        start += len;
    }
    out
}

/// The seed stream of worker `worker`'s own noise at a step: worker 0 keeps the single-device
/// streams (0 for the backend, 1 for the task), so one worker is the plain run.
fn worker_stream(worker: usize, base: u64) -> u64 {
    base + 16 * worker as u64
}

/// One worker's replica: its device, model and optimizer state.
pub(super) struct Replica<B: AutodiffBackend, M: AutodiffModule<B>> {
    pub device: B::Device,
    /// `None` only while a step runs.
    pub model: Option<M>,
    pub optim: Optim<B, M>,
}

/// Held while the collective serves this run's workers (one data-parallel run per process).
static COLLECTIVE: Mutex<()> = Mutex::new(());

/// The extra workers of a run (worker 0 is the engine's own model and optimizer) and the
/// registration with Burn's collective that they share.
pub(super) struct Workers<B: AutodiffBackend, M: AutodiffModule<B>> {
    /// Workers 1… (empty with one device).
    pub replicas: Vec<Replica<B, M>>,
    /// Held while the workers are registered; `None` with one device.
    session: Option<MutexGuard<'static, ()>>,
}

/// Why the workers could not start or reduce.
#[derive(Debug, thiserror::Error)]
#[error("data-parallel training: {0}")]
pub struct CollectiveFailure(pub String);

impl<B: AutodiffBackend, M: AutodiffModule<B>> Workers<B, M> {
    /// Forks `model` and `optim` (worker 0's, already on `devices[0]`) onto `devices[1..]` and
    /// registers every worker with Burn's collective; with one device, nothing. Returns worker
    /// 0's model with every parameter initialised.
    ///
    /// Burn initialises a parameter at its first use, and a clone of a parameter not yet used
    /// would draw its own values: so with several workers every parameter is initialised here,
    /// in module order, from the backend generator seeded with `seed` (a model that one worker
    /// trains is initialised at its first forward pass instead, in the order the forward pass
    /// uses the parameters, so the two can start from different weights unless the model was
    /// initialised before training).
    pub fn start(
        model: M,
        optim: &Optim<B, M>,
        config: &TrainConfig,
        devices: &[B::Device],
        seed: u64,
    ) -> Result<(M, Self), CollectiveFailure> {
        if devices.len() <= 1 {
            return Ok((
                model,
                Workers {
                    replicas: Vec::new(),
                    session: None,
                },
            ));
        }
        if rayon::current_thread_index().is_some() && rayon::current_num_threads() == 1 {
            // This thread is the only thread of its rayon pool: the other workers' threads would
            // hand their parallel work to it while it waits for them, a deadlock (threads.rs).
            return Err(CollectiveFailure(
                "several workers cannot run when the main thread is rayon's only thread \
                 (ARBOR_POOL=main with one thread): set RAYON_NUM_THREADS to 2 or more, or \
                 unset ARBOR_POOL"
                    .into(),
            ));
        }
        seed_everything::<B>(&devices[0], seed);
        let model = model.fork(&devices[0]);
        // A run that panicked leaves the lock poisoned and the server's peers behind: both are
        // cleared here (`reset_collective`).
        let session = COLLECTIVE.lock().unwrap_or_else(|p| p.into_inner());
        let bytes = optim.to_bytes();
        let mut replicas = Vec::with_capacity(devices.len() - 1);
        for device in &devices[1..] {
            let optim = Optim::<B, M>::new(config)
                .load_bytes(bytes.clone(), device)
                .map_err(|e| CollectiveFailure(format!("the optimizer state: {e}")))?;
            replicas.push(Replica {
                device: device.clone(),
                model: Some(model.clone().fork(device)),
                optim,
            });
        }
        collective::reset_collective::<B::InnerBackend>();
        let config = CollectiveConfig::default().with_num_devices(devices.len());
        // Registration returns once every worker has registered, so all register at once.
        let registered: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = devices
                .iter()
                .enumerate()
                .map(|(w, device)| {
                    let config = config.clone();
                    s.spawn(move || {
                        collective::register::<B::InnerBackend>(
                            PeerId::from(w),
                            device.clone(),
                            config,
                        )
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join()).collect()
        });
        for (w, r) in registered.into_iter().enumerate() {
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Err(CollectiveFailure(format!(
                        "worker {w} could not register with the collective: {e:?}"
                    )))
                }
                Err(_) => {
                    return Err(CollectiveFailure(format!(
                        "worker {w} failed while registering with the collective"
                    )))
                }
            }
        }
        Ok((
            model,
            Workers {
                replicas,
                session: Some(session),
            },
        ))
    }

    /// How many workers, worker 0 included.
    pub fn count(&self) -> usize {
        self.replicas.len() + 1
    }
}

impl<B: AutodiffBackend, M: AutodiffModule<B>> Drop for Workers<B, M> {
    fn drop(&mut self) {
        if self.session.is_some() {
            for w in 0..self.count() {
                let _ = collective::finish_collective::<B::InnerBackend>(PeerId::from(w));
            }
            collective::reset_collective::<B::InnerBackend>();
        }
    }
}

/// Which parameters have a gradient on at least one worker, gathered on the host (which
/// parameters a backward pass reached is known without reading the device).
///
/// A parameter that no share reached must stay without a gradient, as in a one-worker step
/// on the whole batch (Adam skips such a parameter; a zero gradient would still decay its
/// moments and move it); a parameter that some share reached is reduced by every worker, the
/// others adding zeros, so that all reduce the same parameters in the same order.
pub(super) struct Presence {
    reached: Mutex<BTreeSet<ParamId>>,
    all_in: Barrier,
}

impl Presence {
    /// For a step of `workers` workers.
    pub fn new(workers: usize) -> Self {
        Presence {
            reached: Mutex::new(BTreeSet::new()),
            all_in: Barrier::new(workers),
        }
    }

    /// Adds this worker's parameters with a gradient, waits for every worker, and returns the
    /// union.
    fn union(&self, mine: impl IntoIterator<Item = ParamId>) -> BTreeSet<ParamId> {
        self.reached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(mine);
        self.all_in.wait();
        self.reached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Keeps the workers' backward passes apart from each other's graph building.
///
/// Burn 0.21's autodiff keeps one registry of graphs per process, and every `backward()` ends
/// by sweeping *every* graph in it for nodes that look unused. A graph another thread is still
/// building can look unused for a moment (`float_cat` releases its inputs' reference counts
/// before it registers its own step), and the sweep then frees a step that thread still
/// needs: its backward silently loses that part of a gradient (Burn issues #5573 and #5645;
/// fixed after 0.21). On a 2-core machine 6 of 100 runs of `arbor-tasks`'
/// `r2d2_pretraining_trains_the_same_on_two_workers` ended with other weights than one worker
/// (relative differences 2e-3 to 3e-2), none of 300 with this lock. So the workers build
/// their graphs together (forward passes hold [`Graphs::build`], shared) and back-propagate one
/// at a time with nobody building ([`Graphs::sweep`], exclusive). The backward passes of one
/// step run in turn; each still uses every thread of the kernels' pool.
struct Graphs;

/// The lock behind [`Graphs`] (process-wide, like Burn's registry).
static GRAPHS: std::sync::RwLock<()> = std::sync::RwLock::new(());

impl Graphs {
    /// Held while a worker builds its graph (its forward pass and loss).
    fn build() -> std::sync::RwLockReadGuard<'static, ()> {
        GRAPHS.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Held while a worker back-propagates (and Burn sweeps every graph).
    fn sweep() -> std::sync::RwLockWriteGuard<'static, ()> {
        GRAPHS.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// What one worker's step is given besides its replica.
pub(super) struct WorkerStep<'a, T> {
    pub task: &'a T,
    pub config: &'a TrainConfig,
    /// The optimizer step (0-based).
    pub step: u64,
    /// The warmed-up learning rate of this step.
    pub lr: f64,
    /// The annealed temperature in force, if any.
    pub temperature: Option<f64>,
    /// Worker index and the number of workers.
    pub worker: usize,
    pub workers: usize,
    /// This worker's examples.
    pub share: &'a [usize],
    /// This worker's part of the batch's loss terms (1 with one worker).
    pub weight: f64,
    /// Shared by the step's workers (several workers only).
    pub presence: Option<&'a Presence>,
}

/// What one worker's step produced: its updated replica, `[loss, gradient norm, correct]` of
/// the whole batch on its device (after the reduction), and its predictions.
pub(super) struct WorkerOutput<B: AutodiffBackend, M> {
    pub model: M,
    pub values: Tensor<B::InnerBackend, 1>,
    pub total: usize,
    /// The task's panic on this worker, re-raised by the engine once every worker is done (a
    /// worker that stopped would leave the others waiting in the reduction forever).
    pub panic: Option<Box<dyn std::any::Any + Send>>,
}

/// One worker's part of an optimizer step: forward and backward on its share, the reduction of
/// the gradients (several workers), the global norm, clipping and the optimizer update.
pub(super) fn worker_step<B, T>(
    s: WorkerStep<'_, T>,
    model: T::Model,
    optim: &mut Optim<B, T::Model>,
    device: &B::Device,
) -> Result<WorkerOutput<B, T::Model>, CollectiveFailure>
where
    B: AutodiffBackend,
    T: Task<B>,
{
    let parallel = s.workers > 1;
    let seed = s.config.seed;
    // Burn 0.21's generator is one per process whatever the device, so with several workers
    // these seedings and the draws after them interleave (docs/training.md, "Noise").
    seed_everything::<B>(device, step_seed(seed, s.step, worker_stream(s.worker, 0)));
    let ctx = StepContext {
        step: s.step,
        noise_seed: step_seed(seed, s.step, worker_stream(s.worker, 1)),
        temperature: s.temperature,
    };
    let zero = || Tensor::<B::InnerBackend, 1>::zeros([1], device);
    // The task's loss (scaled by the share's weight with several workers: with one, it is left
    // as it is, bit for bit), its value, the correct count and the gradients.
    let run = || {
        let (loss, correct, total) = {
            let _building = parallel.then(Graphs::build);
            let out = s.task.step(&model, s.share, ctx, device);
            let loss = if parallel {
                out.loss.mul_scalar(s.weight)
            } else {
                out.loss
            };
            (loss, out.correct, out.total)
        };
        let value = loss.clone().inner().sum();
        let gradients = {
            let _sweeping = parallel.then(Graphs::sweep);
            loss.backward()
        };
        let grads = GradientsParams::from_grads(gradients, &model);
        let correct = correct.map_or_else(zero, |c| c.inner().float().sum());
        (value, correct, total, grads)
    };
    let mut panic = None;
    let (loss, correct, total, mut grads) = if s.share.is_empty() {
        (zero(), zero(), 0, GradientsParams::new())
    } else if !parallel {
        run()
    } else {
        // Caught so that this worker still takes part in the reduction below.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
            Ok(r) => r,
            Err(p) => {
                panic = Some(p);
                (zero(), zero(), 0, GradientsParams::new())
            }
        }
    };
    let (loss, correct) = if let Some(presence) = s.presence {
        let peer = PeerId::from(s.worker);
        // Every worker must reduce the same parameters in the same order: a parameter another
        // share reached and this one did not (or an empty share) contributes zeros.
        let mut mine = Vec::new();
        model.visit(&mut Reached::<B> {
            grads: &grads,
            ids: &mut mine,
            backend: std::marker::PhantomData,
        });
        let reached = presence.union(mine);
        model.visit(&mut FillMissing::<B> {
            grads: &mut grads,
            reached: &reached,
            device,
        });
        grads = grads
            .all_reduce::<B::InnerBackend>(peer, ReduceOperation::Sum)
            .map_err(|e| {
                CollectiveFailure(format!(
                    "worker {} could not reduce its gradients: {e:?}",
                    s.worker
                ))
            })?;
        let both = Tensor::cat(vec![loss, correct], 0)
            .into_primitive()
            .tensor();
        let summed = collective::all_reduce::<B::InnerBackend>(peer, both, ReduceOperation::Sum)
            .map_err(|e| {
                CollectiveFailure(format!(
                    "worker {} could not reduce its loss: {e:?}",
                    s.worker
                ))
            })?;
        let summed = Tensor::<B::InnerBackend, 1>::from_primitive(TensorPrimitive::Float(summed));
        (summed.clone().slice(0..1), summed.slice(1..2))
    } else {
        (loss, correct)
    };
    let norm = grad_norm_on_device::<B, _>(&model, &grads);
    let values = Tensor::cat(vec![loss, norm.clone().unwrap_or_else(zero), correct], 0);
    if let (Some(max), Some(norm)) = (s.config.clip_norm, norm) {
        clip_on_device::<B, _>(&model, &mut grads, norm, max);
    }
    let model = optim.step(s.lr, model, grads);
    Ok(WorkerOutput {
        model,
        values,
        total,
        panic,
    })
}

/// The parameters that have a gradient in `grads`.
struct Reached<'a, B: AutodiffBackend> {
    grads: &'a GradientsParams,
    ids: &'a mut Vec<ParamId>,
    backend: std::marker::PhantomData<B>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Reached<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if self.grads.get::<B::InnerBackend, D>(param.id).is_some() {
            self.ids.push(param.id);
        }
    }
}

/// Registers zero gradients for the parameters in `reached` that `grads` lacks.
struct FillMissing<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    reached: &'a BTreeSet<ParamId>,
    device: &'a B::Device,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for FillMissing<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if !self.reached.contains(&param.id)
            || self.grads.get::<B::InnerBackend, D>(param.id).is_some()
        {
            return;
        }
        let shape = param.lazy_shape();
        self.grads.register(
            param.id,
            Tensor::<B::InnerBackend, D>::zeros(shape, self.device),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_contiguous_and_differ_by_at_most_one() {
        let batch: Vec<usize> = (10..17).collect();
        let s = shares(&batch, 3);
        assert_eq!(s, vec![&[10, 11, 12][..], &[13, 14], &[15, 16]]);
        assert_eq!(shares(&batch, 1), vec![&batch[..]]);
        let small = [4, 5];
        assert_eq!(shares(&small, 3), vec![&[4][..], &[5], &[]]);
        let empty: &[usize] = &[];
        assert_eq!(shares(empty, 2), vec![empty, empty]);
    }
}
