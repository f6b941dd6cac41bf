//! The KV cache, owned by the caller and passed into every forward.
//!
//! Preallocated per layer to a fixed capacity: `[1, n_kv_heads, capacity, head_dim]`. A
//! forward writes its T new rows at `len..len+T` and the cache then counts them; `truncate`
//! drops rows, and `compact` keeps a chosen subset of the rows just appended, in order, so
//! that an accepted tree path becomes a plain prefix again.

use burn::tensor::{Device, Int, Tensor, TensorData};

#[derive(Debug)]
pub struct KvCache {
    /// Per layer (k, v), each [1, n_kv_heads, capacity, head_dim]. `None` only while a
    /// write holds the buffers (taken so the backend sees them uniquely owned and writes in
    /// place instead of copying the whole cache).
    layers: Vec<Option<(Tensor<4>, Tensor<4>)>>,
    len: usize,
    capacity: usize,
}

impl KvCache {
    pub fn new(
        n_layers: usize,
        n_kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        device: &Device,
    ) -> Self {
        let z = || Tensor::<4>::zeros([1, n_kv_heads, capacity, head_dim], device);
        Self {
            layers: (0..n_layers).map(|_| Some((z(), z()))).collect(),
            len: 0,
            capacity,
        }
    }

    /// Rows held (tokens whose keys and values are cached).
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Write `k`, `v` ([1, n_kv, T, head_dim]) of `layer` at rows `len..len+T` and return the
    /// keys and values of rows `0..len+T`. Rows are counted by [`KvCache::advance`] once every
    /// layer has written. The caller checks capacity first.
    pub(crate) fn write(
        &mut self,
        layer: usize,
        k: Tensor<4>,
        v: Tensor<4>,
    ) -> (Tensor<4>, Tensor<4>) {
        let [_, h, t, d] = k.dims();
        let end = self.len + t;
        let (ck, cv) = self.layers[layer]
            .take()
            .expect("cache layer is present between writes");
        let ck = ck.slice_assign([0..1, 0..h, self.len..end, 0..d], k);
        let cv = cv.slice_assign([0..1, 0..h, self.len..end, 0..d], v);
        let out = (
            ck.clone().slice([0..1, 0..h, 0..end, 0..d]),
            cv.clone().slice([0..1, 0..h, 0..end, 0..d]),
        );
        self.layers[layer] = Some((ck, cv));
        out
    }

    /// Count `t` rows written by the last forward.
    pub(crate) fn advance(&mut self, t: usize) {
        self.len += t;
    }

    /// Keep only the first `n` rows.
    pub fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
    }

    /// Of the last `appended` rows, keep those at offsets `keep` (ascending, each < appended)
    /// and move them to follow the prefix, in order. The prefix before them is untouched.
    pub fn compact(&mut self, appended: usize, keep: &[usize]) {
        let start = self.len - appended;
        debug_assert!(keep.windows(2).all(|w| w[0] < w[1]) && keep.iter().all(|&k| k < appended));
        // Already a prefix of the appended rows: nothing to move.
        if keep.iter().enumerate().all(|(i, &k)| i == k) {
            self.len = start + keep.len();
            return;
        }
        let Some(Some((first, _))) = self.layers.first() else {
            return;
        };
        let device = first.device();
        let idx: Vec<i64> = keep.iter().map(|&k| (start + k) as i64).collect();
        let n = idx.len();
        let idx = Tensor::<1, Int>::from_data(TensorData::new(idx, [n]), &device);
        let move_rows = |c: Tensor<4>| {
            let [_, h, _, d] = c.dims();
            // [1, h, n, d]: the kept rows, gathered before they are overwritten.
            let rows = c.clone().select(2, idx.clone());
            c.slice_assign([0..1, 0..h, start..start + n, 0..d], rows)
        };
        for layer in &mut self.layers {
            let (k, v) = layer.take().expect("cache layer is present between writes");
            *layer = Some((move_rows(k), move_rows(v)));
        }
        self.len = start + n;
    }
}
