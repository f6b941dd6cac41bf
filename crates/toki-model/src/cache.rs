//! The KV cache, owned by the caller and passed into every forward.
//!
//! Preallocated per layer to a fixed capacity: `[1, n_kv_heads, capacity, head_dim]`. A
//! forward writes its T new rows at `len..len+T` and the cache then counts them; `truncate`
//! drops rows, and `compact` keeps a chosen subset of the rows just appended, in order, so
//! that an accepted tree path becomes a plain prefix again.
//!
//! Where the model runs the CPU fast path (flex, f32) the rows live in host memory, where
//! the host attention kernel ([`crate::attention`]) reads them in place; elsewhere they are
//! device tensors.

use burn::tensor::{Device, Int, Tensor, TensorData};

#[derive(Debug)]
pub struct KvCache {
    store: Store,
    n_kv_heads: usize,
    head_dim: usize,
    device: Device,
    len: usize,
    capacity: usize,
}

#[derive(Debug)]
enum Store {
    /// Per layer (k, v), each [1, n_kv_heads, capacity, head_dim]. `None` only while a
    /// write holds the buffers (taken so the backend sees them uniquely owned and writes in
    /// place instead of copying the whole cache).
    Device(Vec<Option<(Tensor<4>, Tensor<4>)>>),
    /// Per layer (k, v) in host memory, row-major: keys transposed, [n_kv_heads, head_dim,
    /// capacity] (a query's scores are then sums of contiguous rows, which vectorise),
    /// values [n_kv_heads, capacity, head_dim].
    Host(Vec<(Vec<f32>, Vec<f32>)>),
}

impl KvCache {
    /// A cache of device tensors.
    pub fn new(
        n_layers: usize,
        n_kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        device: &Device,
    ) -> Self {
        let z = || Tensor::<4>::zeros([1, n_kv_heads, capacity, head_dim], device);
        Self {
            store: Store::Device((0..n_layers).map(|_| Some((z(), z()))).collect()),
            n_kv_heads,
            head_dim,
            device: device.clone(),
            len: 0,
            capacity,
        }
    }

    /// A cache in host memory, for models on the CPU fast path (f32 on the flex device).
    pub fn new_host(
        n_layers: usize,
        n_kv_heads: usize,
        head_dim: usize,
        capacity: usize,
        device: &Device,
    ) -> Self {
        let z = || vec![0.0f32; n_kv_heads * capacity * head_dim];
        Self {
            store: Store::Host((0..n_layers).map(|_| (z(), z())).collect()),
            ..Self::new(0, n_kv_heads, head_dim, capacity, device)
        }
    }

    /// Whether the rows live in host memory (see the module docs).
    pub fn is_host(&self) -> bool {
        matches!(self.store, Store::Host(_))
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
        let layers = match &mut self.store {
            Store::Device(layers) => layers,
            Store::Host(_) => {
                // Burn's attention over a host cache (a model on an autodiff device: every
                // other step on a host cache takes the host kernel): rows in, a tensor
                // copy of rows 0..end out.
                self.write_host(layer, &host_vec(k), &host_vec(v), t);
                let (ck, cv) = self.host_layer(layer);
                let cap = self.capacity;
                let keys: Vec<f32> = (0..h)
                    .flat_map(|g| {
                        (0..end).flat_map(move |j| (0..d).map(move |c| ck[(g * d + c) * cap + j]))
                    })
                    .collect();
                let values: Vec<f32> = (0..h)
                    .flat_map(|g| &cv[g * cap * d..(g * cap + end) * d])
                    .copied()
                    .collect();
                let tensor = |x: Vec<f32>| {
                    Tensor::<4>::from_data(TensorData::new(x, [1, h, end, d]), &self.device)
                };
                return (tensor(keys), tensor(values));
            }
        };
        let (ck, cv) = layers[layer]
            .take()
            .expect("cache layer is present between writes");
        let ck = ck.slice_assign([0..1, 0..h, self.len..end, 0..d], k);
        let cv = cv.slice_assign([0..1, 0..h, self.len..end, 0..d], v);
        let out = (
            ck.clone().slice([0..1, 0..h, 0..end, 0..d]),
            cv.clone().slice([0..1, 0..h, 0..end, 0..d]),
        );
        layers[layer] = Some((ck, cv));
        out
    }

    /// Host cache: write `k`, `v` ([n_kv, T, head_dim] row-major) of `layer` at rows
    /// `len..len+T`.
    pub(crate) fn write_host(&mut self, layer: usize, k: &[f32], v: &[f32], t: usize) {
        let (hd, cap, len) = (self.head_dim, self.capacity, self.len);
        let Store::Host(layers) = &mut self.store else {
            panic!("write_host on a device cache");
        };
        let (ck, cv) = &mut layers[layer];
        for g in 0..self.n_kv_heads {
            for i in 0..t {
                let row = (g * t + i) * hd;
                for c in 0..hd {
                    ck[(g * hd + c) * cap + len + i] = k[row + c];
                }
            }
            let dst = (g * cap + len) * hd..(g * cap + len + t) * hd;
            cv[dst].copy_from_slice(&v[g * t * hd..(g + 1) * t * hd]);
        }
    }

    /// Host cache: `layer`'s keys [n_kv, head_dim, capacity] and values [n_kv, capacity,
    /// head_dim].
    pub(crate) fn host_layer(&self, layer: usize) -> (&[f32], &[f32]) {
        let Store::Host(layers) = &self.store else {
            panic!("host_layer on a device cache");
        };
        (&layers[layer].0, &layers[layer].1)
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
        let n = keep.len();
        let layers = match &mut self.store {
            Store::Device(layers) => layers,
            Store::Host(layers) => {
                let (hd, cap) = (self.head_dim, self.capacity);
                // Ascending `keep`: row start + i comes from start + keep[i] >= it, never
                // overwritten before it is read.
                for (k, v) in layers.iter_mut() {
                    for (i, &from) in keep.iter().enumerate() {
                        for g in 0..self.n_kv_heads {
                            let src = (g * cap + start + from) * hd;
                            v.copy_within(src..src + hd, (g * cap + start + i) * hd);
                            for c in 0..hd {
                                let col = (g * hd + c) * cap + start;
                                k[col + i] = k[col + from];
                            }
                        }
                    }
                }
                self.len = start + n;
                return;
            }
        };
        let idx: Vec<i64> = keep.iter().map(|&k| (start + k) as i64).collect();
        let idx = Tensor::<1, Int>::from_data(TensorData::new(idx, [n]), &self.device);
        let move_rows = |c: Tensor<4>| {
            let [_, h, _, d] = c.dims();
            // [1, h, n, d]: the kept rows, gathered before they are overwritten.
            let rows = c.clone().select(2, idx.clone());
            c.slice_assign([0..1, 0..h, start..start + n, 0..d], rows)
        };
        for layer in layers.iter_mut() {
            let (k, v) = layer.take().expect("cache layer is present between writes");
            *layer = Some((move_rows(k), move_rows(v)));
        }
        self.len = start + n;
    }
}

/// A tensor's values on the host, in its logical (row-major) order (the host paths run
/// only on f32 models).
pub(crate) fn host_vec<const D: usize>(x: Tensor<D>) -> Vec<f32> {
    x.into_data()
        .try_into_vec::<f32>()
        .expect("the host kernels run only on f32 models")
}
