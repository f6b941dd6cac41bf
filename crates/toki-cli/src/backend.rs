//! Run-time backend choice among those compiled in (`--features wgpu`, `cuda`).

use anyhow::{Result, bail};
use burn::tensor::Device;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// CUDA if compiled and present, then wgpu with a real device, then cpu.
    Auto,
    /// Burn's pure-Rust CPU backend (flex).
    Cpu,
    Wgpu,
    Cuda,
}

impl Backend {
    /// Its `--backend` name: heads folders keep a calibration per backend under it
    /// (`tree-cpu.json`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Cpu => "cpu",
            Self::Wgpu => "wgpu",
            Self::Cuda => "cuda",
        }
    }
}

#[allow(unused_variables)]
fn available(b: Backend) -> Result<Device> {
    match b {
        Backend::Cpu => Ok(Device::flex()),
        Backend::Wgpu => {
            #[cfg(feature = "wgpu")]
            {
                use burn::tensor::{DeviceKind, DeviceType};
                if Device::enumerate(DeviceType::Wgpu).into_vec().is_empty() {
                    bail!(
                        "no wgpu adapter found (is a Vulkan driver installed? e.g. apt-get install mesa-vulkan-drivers)"
                    );
                }
                Ok(Device::wgpu(DeviceKind::DefaultDevice))
            }
            #[cfg(not(feature = "wgpu"))]
            bail!("the wgpu backend is not compiled in (build with --features wgpu)")
        }
        Backend::Cuda => {
            #[cfg(feature = "cuda")]
            {
                use burn::tensor::DeviceType;
                if Device::enumerate(DeviceType::Cuda).into_vec().is_empty() {
                    bail!("no CUDA device found");
                }
                Ok(Device::cuda(0))
            }
            #[cfg(not(feature = "cuda"))]
            bail!("the cuda backend is not compiled in (build with --features cuda)")
        }
        Backend::Auto => unreachable!("auto is resolved by `device`"),
    }
}

/// The device for `--backend`.
pub fn device(b: Backend) -> Result<Device> {
    resolve(b).map(|(_, device)| device)
}

/// The device for `--backend`, and which backend it is (`auto` settled).
pub fn resolve(b: Backend) -> Result<(Backend, Device)> {
    match b {
        Backend::Auto => [Backend::Cuda, Backend::Wgpu]
            .into_iter()
            .filter(|&b| {
                cfg!(feature = "cuda") && b == Backend::Cuda
                    || cfg!(feature = "wgpu") && b == Backend::Wgpu
            })
            .find_map(|b| {
                available(b)
                    .ok()
                    .filter(|d| b != Backend::Wgpu || is_real_gpu(d))
                    .map(|d| (b, d))
            })
            .map_or_else(|| Ok((Backend::Cpu, available(Backend::Cpu)?)), Ok),
        other => Ok((other, available(other)?)),
    }
}

/// `auto` skips a wgpu device that is only a software rasteriser (lavapipe): flex is faster.
#[allow(unused_variables)]
fn is_real_gpu(device: &Device) -> bool {
    #[cfg(feature = "wgpu")]
    {
        use burn::tensor::DeviceType;
        let cpu_only = Device::enumerate(DeviceType::Wgpu)
            .into_vec()
            .iter()
            .all(|d| format!("{d:?}").contains("Cpu"));
        return !cpu_only;
    }
    #[allow(unreachable_code)]
    false
}
