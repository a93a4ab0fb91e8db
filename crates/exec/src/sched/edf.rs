//! placeholder
use super::*;
#[derive(Debug, Clone)]
pub struct Edf;
impl Edf {
    pub fn new(_b: u64) -> Self {
        Edf
    }
}
impl Policy for Edf {
    fn name(&self) -> &'static str {
        "edf"
    }
    fn accepts(&self, p: &Params) -> bool {
        matches!(p, Params::Edf { .. })
    }
    fn add(&mut self, _t: TaskId, _p: Params, _n: u64) -> Result<(), AdmitError> {
        todo!()
    }
    fn remove(&mut self, t: TaskId, _n: u64) -> Result<(), UnknownTask> {
        Err(UnknownTask(t))
    }
    fn wake(&mut self, t: TaskId, _n: u64) -> Result<(), UnknownTask> {
        Err(UnknownTask(t))
    }
    fn block(&mut self, t: TaskId, _n: u64) -> Result<(), UnknownTask> {
        Err(UnknownTask(t))
    }
    fn yield_now(&mut self, t: TaskId, _n: u64) -> Result<(), UnknownTask> {
        Err(UnknownTask(t))
    }
    fn charge(&mut self, t: TaskId, _r: u64, _n: u64) -> Result<(), UnknownTask> {
        Err(UnknownTask(t))
    }
    fn pick(&mut self, _n: u64) -> Dispatch {
        Dispatch::idle(None)
    }
    fn params(&self, _t: TaskId) -> Option<Params> {
        None
    }
    fn runnable(&self, _t: TaskId) -> Option<bool> {
        None
    }
}
