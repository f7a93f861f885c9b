//! The VM rig: boots QEMU with emulated NVMe and ZNS controllers under TCG,
//! runs one command in the guest and returns its output and exit status.
//!
//! The guest is a busybox initramfs. Its `/init` loads the kernel's vfio
//! modules, binds every NVMe function (class 0x010802) to vfio-pci except
//! those left to the kernel, runs the command with its output on the second
//! serial port, and reports the exit status through QEMU's isa-debug-exit
//! device (`rig-exit`). A hard timeout kills QEMU; nothing here waits
//! without a bound.
//!
//! Besides our static tools, a run can carry dynamically linked host
//! programs ([`Vm::host_program`]: the binary, every library `ldd` lists and
//! the dynamic loader, at their host paths) and extra kernel command-line
//! arguments ([`Vm::append`], e.g. `nvme.poll_queues=1` for polled I/O on
//! kernel-owned controllers).
//!
//! ```no_run
//! use vm_rig::{Controller, Vm};
//! let outcome = Vm::new()
//!     .controller(Controller::nvme(1 << 30).lba(4096))
//!     .controller(Controller::zns(2 << 30, 64 << 20).max_open(8).max_active(8))
//!     .run(&["identify", "--json"])
//!     .unwrap();
//! assert_eq!(outcome.status, 0, "{}", outcome.output);
//! ```

mod devices;
mod initramfs;

pub use devices::{Controller, Discard, Zoned};
pub use nvme_report::size::format_size;

/// Parses a byte size as the rig's command lines write it (`512`, `4K`,
/// `64M`, `1G`, `2T`; binary multiples, as QEMU reads them).
pub fn parse_size(text: &str) -> Result<u64, Error> {
    nvme_report::size::parse_size(text).map_err(|e| Error::Spec(e.to_string()))
}

use std::collections::BTreeSet;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// The vfio modules the guest loads, in dependency order.
const VFIO_MODULES: [&str; 6] = ["irqbypass", "vfio", "vfio_iommu_type1", "vfio_virqfd", "vfio-pci-core", "vfio-pci"];

/// First PCI slot on the root bus for our controllers; controller N sits at
/// `00:(FIRST_SLOT+N).0`, so controllers appear in the guest in the order
/// given. A kernel-owned controller N's first namespace is `/dev/ctrlNn1`.
pub const FIRST_SLOT: u8 = 0x10;

/// At most this many controllers (slots 0x10..=0x1e; 0x1f is the LPC bridge).
pub const MAX_CONTROLLERS: usize = 15;

/// The console line `/init` prints with the command's exact exit status.
const STATUS_MARKER: &str = "rig: exit status ";

/// The x86 kernel's command-line limit (`COMMAND_LINE_SIZE`), terminator
/// included; a longer line is silently cut, so the rig refuses it.
const KERNEL_CMDLINE_MAX_BYTES: usize = 2048;

/// How long `ldd` may take to list a host program's libraries.
const LDD_TIMEOUT: Duration = Duration::from_secs(30);

/// Directories the initramfs always has, created before anything else.
const BASE_DIRS: [&str; 7] = ["bin", "dev", "proc", "sys", "tmp", "rig", "rig/modules"];

/// Everything that can go wrong in the rig, each with enough context to act on.
#[derive(Debug)]
pub enum Error {
    /// A device or option description that cannot work.
    Spec(String),
    /// A host tool or file the rig needs is missing.
    Missing(String),
    /// A file operation failed.
    Io { context: String, source: io::Error },
    /// Building the static guest binaries failed.
    Build(String),
    /// QEMU did not finish within the timeout and was killed. `output_tail`
    /// is the end of what the command printed, to tell where it stopped.
    Timeout { seconds: u64, console_tail: String, output_tail: String },
    /// QEMU ended without the guest reporting a status.
    Guest { reason: String, console_tail: String, output_tail: String, qemu_stderr: String },
    /// QEMU itself died by a signal (a crash of the emulator, not of the
    /// guest): the signal, and the command line that ran it, to reproduce
    /// it (docs/rig.md says how to keep its core dump).
    QemuKilled { signal: i32, qemu_command: String, console_tail: String, output_tail: String, qemu_stderr: String },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Spec(msg) => write!(f, "{msg}"),
            Error::Missing(msg) => write!(f, "{msg} (hack/deps installs what the rig needs)"),
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::Build(msg) => write!(f, "building guest binaries failed:\n{msg}"),
            Error::Timeout { seconds, console_tail, output_tail } => {
                write!(f, "VM timed out after {seconds} s and was killed; guest console ends with:\n{console_tail}")?;
                write!(f, "\nthe command's output ends with:\n{output_tail}")
            }
            Error::QemuKilled { signal, qemu_command, console_tail, output_tail, qemu_stderr } => {
                write!(
                    f,
                    "QEMU was killed by signal {signal} ({}): the emulator died, not the guest",
                    signal_name(*signal)
                )?;
                if !qemu_stderr.trim().is_empty() {
                    write!(f, "\nqemu: {}", qemu_stderr.trim())?;
                }
                write!(f, "\nguest console ends with:\n{console_tail}")?;
                write!(f, "\nthe command's output ends with:\n{output_tail}")?;
                write!(f, "\nQEMU ran as (with `ulimit -c unlimited` it leaves a core; docs/rig.md):\n{qemu_command}")
            }
            Error::Guest { reason, console_tail, output_tail, qemu_stderr } => {
                write!(f, "{reason}")?;
                if !qemu_stderr.trim().is_empty() {
                    write!(f, "\nqemu: {}", qemu_stderr.trim())?;
                }
                write!(f, "\nguest console ends with:\n{console_tail}")?;
                write!(f, "\nthe command's output ends with:\n{output_tail}")
            }
        }
    }
}

impl std::error::Error for Error {}

fn io_error(context: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

/// What a guest command did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The command's exit status (a shell's 128+N for a signal N).
    pub status: i32,
    /// The command's stdout and stderr, interleaved as the guest wrote them.
    pub output: String,
    /// The kernel console, for diagnosis.
    pub console: String,
    /// Wall time from QEMU's start to its exit.
    pub elapsed: Duration,
}

impl Outcome {
    /// The output's lines that are not log noise, for parsing JSON output.
    pub fn output_json(&self) -> Option<&str> {
        let start = self.output.find(['{', '['])?;
        Some(self.output[start..].trim_end())
    }

    /// What a failed assertion should show: the status, the time, the
    /// whole output and the console's last lines.
    pub fn report(&self) -> String {
        format!(
            "the guest exited {} after {:.1} s\noutput:\n{}\nconsole tail:\n{}",
            self.status,
            self.elapsed.as_secs_f64(),
            self.output,
            tail(&self.console, CONSOLE_TAIL_LINES)
        )
    }

    /// The rest of the first output line that starts with `prefix`.
    pub fn line_after(&self, prefix: &str) -> Option<&str> {
        self.output.lines().find_map(|line| line.strip_prefix(prefix))
    }

    /// The detail of a guest tool's passed check: the line
    /// `TOOL: LABEL CHECK: ok (DETAIL)` gives `DETAIL`. Panics, showing the
    /// output, when there is none.
    pub fn detail(&self, tool: &str, label: &str, check: &str) -> &str {
        let prefix = format!("{tool}: {label} {check}: ok (");
        let line = self.line_after(&prefix).unwrap_or_else(|| panic!("no {prefix:?} line in\n{}", self.output));
        line.strip_suffix(')').unwrap_or(line)
    }

    /// Of the lines a guest tool prints for a passing run of `label`, each
    /// `TOOL: LABEL CHECK: ok (` of `checks` and the final `TOOL: LABEL ok`,
    /// the ones the output lacks.
    pub fn missing_checks(&self, tool: &str, label: &str, checks: &[&str]) -> Vec<String> {
        let mut missing: Vec<String> = checks
            .iter()
            .map(|check| format!("{tool}: {label} {check}: ok ("))
            .filter(|line| self.line_after(line).is_none())
            .collect();
        let last = format!("{tool}: {label} ok");
        if !self.output.lines().any(|line| line == last) {
            missing.push(last);
        }
        missing
    }
}

/// Console lines [`Outcome::report`] shows.
const CONSOLE_TAIL_LINES: usize = 30;

/// The guest's PCI address of each controller, in the order
/// [`Vm::controller`] added them (slot [`FIRST_SLOT`] + its index).
pub const GUEST_BDFS: [&str; MAX_CONTROLLERS] = [
    "0000:00:10.0",
    "0000:00:11.0",
    "0000:00:12.0",
    "0000:00:13.0",
    "0000:00:14.0",
    "0000:00:15.0",
    "0000:00:16.0",
    "0000:00:17.0",
    "0000:00:18.0",
    "0000:00:19.0",
    "0000:00:1a.0",
    "0000:00:1b.0",
    "0000:00:1c.0",
    "0000:00:1d.0",
    "0000:00:1e.0",
];

/// Called with each line of the guest command's output as it arrives
/// (without its line ending); see [`Vm::on_line`].
#[derive(Clone)]
struct LineObserver(Arc<dyn Fn(&str) + Send + Sync>);

impl fmt::Debug for LineObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LineObserver")
    }
}

/// One VM run's configuration. See the crate docs for an example.
#[derive(Debug, Clone)]
pub struct Vm {
    controllers: Vec<Controller>,
    images_dir: Option<PathBuf>,
    mem_bytes: u64,
    smp: u32,
    hugepages: u32,
    timeout: Duration,
    stream: bool,
    on_line: Option<LineObserver>,
    extra_binaries: Vec<PathBuf>,
    /// Kernel modules to load after the vfio ones (with their dependencies).
    kernel_modules: Vec<String>,
    host_programs: Vec<PathBuf>,
    cmdline_extra: Vec<String>,
    qmp_actions: Vec<QmpAction>,
    /// The QEMU binary, when not the default ([`Vm::qemu`]).
    qemu: Option<PathBuf>,
}

/// QMP commands the rig sends when the guest prints a line containing
/// `marker` (each action fires once).
#[derive(Debug, Clone)]
struct QmpAction {
    marker: String,
    commands: Vec<String>,
}

impl Default for Vm {
    fn default() -> Self {
        Vm::new()
    }
}

impl Vm {
    pub fn new() -> Self {
        Vm {
            controllers: Vec::new(),
            images_dir: None,
            mem_bytes: 2 << 30,
            smp: 2,
            hugepages: 128,
            timeout: Duration::from_secs(300),
            stream: false,
            on_line: None,
            extra_binaries: Vec::new(),
            kernel_modules: Vec::new(),
            host_programs: Vec::new(),
            cmdline_extra: Vec::new(),
            qmp_actions: Vec::new(),
            qemu: None,
        }
    }

    /// When a line of the guest command's output contains `marker`, sends
    /// `commands` (QMP JSON, e.g. `{"execute":"device_del","arguments":
    /// {"id":"nvme0"}}`) to QEMU's monitor, in order, once. Controllers are
    /// QOM devices `nvme0`, `nvme1`, ... (paths `/machine/peripheral/nvme0`).
    /// The responses are echoed to stderr as `rig: qmp ...` lines; a failed
    /// command does not stop the run (the guest sees what happened).
    pub fn qmp_on_output(mut self, marker: impl Into<String>, commands: &[&str]) -> Self {
        self.qmp_actions
            .push(QmpAction { marker: marker.into(), commands: commands.iter().map(|c| c.to_string()).collect() });
        self
    }

    /// Adds a controller; controllers appear in the guest in this order.
    pub fn controller(mut self, controller: Controller) -> Self {
        self.controllers.push(controller);
        self
    }

    /// Keeps backing images in `dir` across runs (`nvme0.img`, ...) instead
    /// of fresh ones.
    pub fn images(mut self, dir: impl Into<PathBuf>) -> Self {
        self.images_dir = Some(dir.into());
        self
    }

    pub fn mem(mut self, bytes: u64) -> Self {
        self.mem_bytes = bytes;
        self
    }

    pub fn smp(mut self, cpus: u32) -> Self {
        self.smp = cpus;
        self
    }

    /// 2 MiB hugepages the guest reserves before running the command.
    pub fn hugepages(mut self, pages: u32) -> Self {
        self.hugepages = pages;
        self
    }

    /// Runs this QEMU binary instead of `RIG_QEMU` or the one on `PATH`.
    pub fn qemu(mut self, path: impl Into<PathBuf>) -> Self {
        self.qemu = Some(path.into());
        self
    }

    /// The hard limit on the whole run, boot included.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Echo the guest command's output to stdout as it arrives.
    pub fn stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Calls `observer` with each line of the guest command's output as it
    /// arrives (line ending removed), e.g. to report progress. The whole
    /// output is still returned in [`Outcome::output`].
    pub fn on_line(mut self, observer: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_line = Some(LineObserver(Arc::new(observer)));
        self
    }

    /// Adds a static host binary to the guest's /bin.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.extra_binaries.push(path.into());
        self
    }

    /// Adds a host program, static or dynamically linked, at its own path
    /// (e.g. `/usr/bin/fio`), with every shared library `ldd` lists and the
    /// dynamic loader, each at the path `ldd` names. Libraries a program
    /// opens at run time (`dlopen`) are not found this way. The guest's
    /// `PATH` includes `/usr/bin`, `/sbin` and `/usr/sbin` after `/bin`.
    pub fn host_program(mut self, path: impl Into<PathBuf>) -> Self {
        self.host_programs.push(path.into());
        self
    }

    /// Loads kernel module `name` (e.g. `btrfs`) in the guest, after the
    /// vfio modules, with the modules it depends on (from `modinfo`) first.
    /// The guest kernel's modules must be uncompressed, as Debian's are.
    pub fn kernel_module(mut self, name: impl Into<String>) -> Self {
        self.kernel_modules.push(name.into());
        self
    }

    /// Appends `args` (one or more space-separated words, e.g.
    /// `nvme.poll_queues=1`) to the guest kernel's command line, after the
    /// rig's own arguments.
    pub fn append(mut self, args: impl Into<String>) -> Self {
        self.cmdline_extra.push(args.into());
        self
    }

    /// Boots the VM, runs `command` in the guest and returns what it did.
    /// `command[0]` is a guest binary (our tools, busybox applets) or `sh`.
    pub fn run<S: AsRef<str>>(&self, command: &[S]) -> Result<Outcome, Error> {
        if command.is_empty() {
            return Err(Error::Spec("no guest command given".into()));
        }
        if self.controllers.len() > MAX_CONTROLLERS {
            return Err(Error::Spec(format!("at most {MAX_CONTROLLERS} controllers per VM")));
        }
        for controller in &self.controllers {
            controller.validate()?;
        }
        let cmdline = self.kernel_cmdline();
        check_cmdline(&cmdline)?;
        let mut kernel = find_kernel()?;
        kernel.extra_modules = resolve_modules(&kernel, &self.kernel_modules)?;
        let busybox = find_busybox()?;
        let qemu = match &self.qemu {
            Some(path) => path.clone(),
            None => qemu_binary()?,
        };
        let mut binaries = guest_binaries()?.to_vec();
        binaries.extend(self.extra_binaries.iter().cloned());
        let mut host_files = BTreeSet::new();
        for program in &self.host_programs {
            host_files.extend(host_program_files(program)?);
        }

        let work = WorkDir::new()?;
        let initrd = work.path.join("initrd.cpio");
        let contents = Contents { kernel: &kernel, busybox: &busybox, binaries: &binaries, host_files: &host_files };
        self.write_initramfs(&initrd, &contents, command)?;
        let images = self.prepare_images(&work.path)?;

        let _slot = VmSlot::acquire()?;
        let console_path = work.path.join("console.log");
        let mut args: Vec<String> = vec![
            "-accel".into(),
            "tcg".into(),
            "-cpu".into(),
            "max".into(),
            "-M".into(),
            "q35".into(),
            "-m".into(),
            format!("{}M", self.mem_bytes >> 20),
            "-smp".into(),
            self.smp.to_string(),
            "-nodefaults".into(),
            "-display".into(),
            "none".into(),
            "-no-reboot".into(),
            // The IOMMU must come before the devices it translates for.
            "-device".into(),
            "intel-iommu,aw-bits=48".into(),
            "-kernel".into(),
            kernel.image.display().to_string(),
            "-initrd".into(),
            initrd.display().to_string(),
            "-append".into(),
            cmdline,
            "-serial".into(),
            format!("file:{}", console_path.display()),
            "-chardev".into(),
            "stdio,id=out,signal=off".into(),
            "-serial".into(),
            "chardev:out".into(),
            "-device".into(),
            "isa-debug-exit,iobase=0xf4,iosize=4".into(),
        ];
        for (index, (controller, image)) in self.controllers.iter().zip(&images).enumerate() {
            let slot = FIRST_SLOT + u8::try_from(index).expect("bounded by MAX_CONTROLLERS");
            args.extend(controller.qemu_args(index, &image.display().to_string(), slot));
        }

        let qmp_socket = work.path.join("qmp.sock");
        if !self.qmp_actions.is_empty() {
            args.extend(["-qmp".into(), format!("unix:{},server=on,wait=off", qmp_socket.display())]);
        }

        args.extend(extra_qemu_args());

        let started = Instant::now();
        let mut command = Command::new(&qemu);
        command.args(&args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        // QEMU dies with the process that started it: a killed test or
        // benchmark must not leave a VM running (and holding its slot's
        // CPU) behind.
        let die_with_parent = || {
            // SAFETY: PR_SET_PDEATHSIG with a valid signal number; prctl
            // reads no memory of ours.
            let result = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            if result == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        };
        // SAFETY: the closure runs in the child between fork and exec; it
        // only calls prctl (async-signal-safe) and allocates nothing.
        unsafe { std::os::unix::process::CommandExt::pre_exec(&mut command, die_with_parent) };
        let mut child = command.spawn().map_err(io_error("starting qemu-system-x86_64"))?;
        let stream = self.stream;
        let on_line = qmp_observer(self.on_line.clone(), &self.qmp_actions, &qmp_socket);
        let stdout = child.stdout.take().expect("piped");
        let reader = thread::spawn(move || collect_output(stdout, stream, on_line));
        let mut stderr_pipe = child.stderr.take().expect("piped");
        let stderr_reader = thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr_pipe.read_to_string(&mut text);
            text
        });

        let exit = wait_bounded(&mut child, self.timeout, "waiting for qemu")?;
        let elapsed = started.elapsed();
        let output = reader.join().unwrap_or_default();
        let qemu_stderr = stderr_reader.join().unwrap_or_default();
        let console = fs::read(&console_path).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();

        let Some(exit) = exit else {
            return Err(Error::Timeout {
                seconds: self.timeout.as_secs(),
                console_tail: tail(&console, TAIL_LINES),
                output_tail: tail(&output, TAIL_LINES),
            });
        };
        let reported =
            console.lines().rev().find_map(|line| line.trim().strip_prefix(STATUS_MARKER)?.trim().parse::<i32>().ok());
        // isa-debug-exit makes QEMU exit with (code << 1) | 1; only the low
        // seven bits of the code survive an 8-bit process status.
        match (exit.code(), reported) {
            (Some(qemu_code), Some(status)) if qemu_code & 1 == 1 && (qemu_code >> 1) == (status & 0x7f) => {
                Ok(Outcome { status, output, console, elapsed })
            }
            (None, _) => Err(Error::QemuKilled {
                signal: std::os::unix::process::ExitStatusExt::signal(&exit).unwrap_or(0),
                qemu_command: shell_words(&qemu, &args),
                console_tail: tail(&console, TAIL_LINES),
                output_tail: tail(&output, TAIL_LINES),
                qemu_stderr,
            }),
            (code, _) => Err(Error::Guest {
                reason: format!("the guest ended without reporting a status (qemu exit {code:?})"),
                console_tail: tail(&console, TAIL_LINES),
                output_tail: tail(&output, TAIL_LINES),
                qemu_stderr,
            }),
        }
    }

    fn kernel_cmdline(&self) -> String {
        let mut cmdline = String::from("console=ttyS0 quiet panic=-1 intel_iommu=on");
        let kernel_owned: Vec<String> = self
            .controllers
            .iter()
            .enumerate()
            .filter(|(_, c)| c.kernel)
            .map(|(index, _)| format!("0000:00:{:02x}.0", usize::from(FIRST_SLOT) + index))
            .collect();
        if kernel_owned.is_empty() {
            // Keep the kernel's nvme driver off every controller.
            cmdline += " initcall_blacklist=nvme_init";
        } else {
            cmdline += &format!(" rig.kernel={}", kernel_owned.join(","));
        }
        cmdline += &format!(" rig.hugepages={}", self.hugepages);
        for extra in &self.cmdline_extra {
            let extra = extra.trim();
            if !extra.is_empty() {
                cmdline.push(' ');
                cmdline += extra;
            }
        }
        cmdline
    }

    fn prepare_images(&self, work: &Path) -> Result<Vec<PathBuf>, Error> {
        let dir = match &self.images_dir {
            Some(dir) => {
                fs::create_dir_all(dir).map_err(io_error(format!("creating {}", dir.display())))?;
                dir.clone()
            }
            None => work.to_path_buf(),
        };
        let mut images = Vec::new();
        for (index, controller) in self.controllers.iter().enumerate() {
            let path = dir.join(format!("nvme{index}.img"));
            match fs::metadata(&path) {
                Ok(meta) if self.images_dir.is_some() => {
                    if meta.len() != controller.size_bytes {
                        return Err(Error::Spec(format!(
                            "{} holds {} bytes but controller {index} is configured with {}; remove it or match the size",
                            path.display(),
                            meta.len(),
                            controller.size_bytes
                        )));
                    }
                }
                _ => {
                    // Sparse, like `truncate -s`.
                    let file = File::create(&path).map_err(io_error(format!("creating {}", path.display())))?;
                    file.set_len(controller.size_bytes).map_err(io_error(format!("sizing {}", path.display())))?;
                }
            }
            images.push(path);
        }
        Ok(images)
    }

    fn write_initramfs<S: AsRef<str>>(&self, path: &Path, contents: &Contents<'_>, command: &[S]) -> Result<(), Error> {
        let file = File::create(path).map_err(io_error(format!("creating {}", path.display())))?;
        let mut archive = initramfs::Archive::new(io::BufWriter::new(file));
        let read = |p: &Path| fs::read(p).map_err(io_error(format!("reading {}", p.display())));
        let pack = |archive: &mut initramfs::Archive<io::BufWriter<File>>| -> Result<(), Error> {
            let mut dirs: BTreeSet<String> = BTreeSet::new();
            for dir in BASE_DIRS {
                archive.dir(dir)?;
                dirs.insert(dir.to_owned());
            }
            archive.file("bin/busybox", 0o755, &read(contents.busybox)?)?;
            archive.symlink("bin/sh", "busybox")?;
            for binary in contents.binaries {
                let name = binary
                    .file_name()
                    .and_then(|n| n.to_str())
                    .ok_or_else(|| Error::Spec(format!("guest binary {} has no usable file name", binary.display())))?;
                archive.file(&format!("bin/{name}"), 0o755, &read(binary)?)?;
            }
            for host_file in contents.host_files {
                let guest_path = guest_path(host_file)?;
                // Parents before children, each once.
                for parent in parent_dirs(&guest_path) {
                    if dirs.insert(parent.clone()) {
                        archive.dir(&parent)?;
                    }
                }
                // fs::read follows symbolic links: the guest gets the
                // library's contents under the name the loader asks for.
                archive.file(&guest_path, 0o755, &read(host_file)?)?;
            }
            for (name, module) in contents.kernel.modules.iter().chain(&contents.kernel.extra_modules) {
                archive.file(&format!("rig/modules/{name}.ko"), 0o644, &read(module)?)?;
            }
            let extra: Vec<&str> = contents.kernel.extra_modules.iter().map(|(name, _)| name.as_str()).collect();
            archive.file("rig/modules/extra", 0o644, extra.join("\n").as_bytes())?;
            archive.file("rig/command.sh", 0o644, shell_command(command).as_bytes())?;
            archive.file("init", 0o755, INIT_SCRIPT.as_bytes())?;
            Ok(())
        };
        pack(&mut archive)?;
        archive.finish().and_then(|mut w| w.flush()).map_err(io_error(format!("writing {}", path.display())))
    }
}

/// What goes into one run's initramfs besides `/init` and the command.
struct Contents<'a> {
    kernel: &'a Kernel,
    busybox: &'a Path,
    /// Static binaries, each to `/bin/<name>`.
    binaries: &'a [PathBuf],
    /// Host files (programs, libraries, the loader), each at its own path.
    host_files: &'a BTreeSet<PathBuf>,
}

/// A host file's path inside the initramfs: absolute, normal components
/// only, stripped of its leading `/`.
fn guest_path(host_file: &Path) -> Result<String, Error> {
    let normal = host_file.is_absolute() && host_file.components().skip(1).all(|c| matches!(c, Component::Normal(_)));
    match host_file.to_str() {
        Some(text) if normal => Ok(text.trim_start_matches('/').to_owned()),
        _ => Err(Error::Spec(format!("host file {} needs a plain absolute UTF-8 path", host_file.display()))),
    }
}

/// The directories above a relative path, outermost first:
/// `usr/lib/x/libc.so` gives `usr`, `usr/lib`, `usr/lib/x`.
fn parent_dirs(relative: &str) -> Vec<String> {
    let mut parents = Vec::new();
    let mut at = 0;
    while let Some(slash) = relative[at..].find('/') {
        at += slash;
        parents.push(relative[..at].to_owned());
        at += 1;
    }
    parents
}

/// Refuses a kernel command line the kernel would cut or misread.
fn check_cmdline(cmdline: &str) -> Result<(), Error> {
    if cmdline.len() >= KERNEL_CMDLINE_MAX_BYTES {
        return Err(Error::Spec(format!(
            "the kernel command line is {} bytes; the limit is {}",
            cmdline.len(),
            KERNEL_CMDLINE_MAX_BYTES - 1
        )));
    }
    if let Some(bad) = cmdline.chars().find(|c| c.is_control()) {
        return Err(Error::Spec(format!("kernel command-line arguments may not contain control characters ({bad:?})")));
    }
    Ok(())
}

/// A host program and the shared objects it loads at start-up: the program
/// itself, then every library and the dynamic loader, as `ldd` lists them.
fn host_program_files(program: &Path) -> Result<Vec<PathBuf>, Error> {
    if !program.is_file() {
        return Err(Error::Missing(format!("host program {} not found", program.display())));
    }
    let ldd = which("ldd")
        .ok_or_else(|| Error::Missing("ldd not found (package libc-bin); needed for host programs".into()))?;
    let HostOutput { status: exit, stdout: listing, stderr: errors } =
        host_command(Command::new(ldd).arg(program), LDD_TIMEOUT)?;
    let libraries = match parse_ldd(&listing) {
        Ok(Linkage::Static) => Vec::new(),
        Ok(Linkage::Dynamic(libraries)) if exit.success() => libraries,
        Ok(Linkage::Dynamic(_)) => {
            return Err(Error::Spec(format!("ldd {} failed ({exit}): {}", program.display(), errors.trim())))
        }
        Err(message) => return Err(Error::Missing(format!("{}: {message}", program.display()))),
    };
    let mut files = vec![program.to_path_buf()];
    files.extend(libraries);
    Ok(files)
}

/// How a program is linked, from `ldd`'s listing.
#[derive(Debug, PartialEq, Eq)]
enum Linkage {
    /// Nothing to load besides the program.
    Static,
    /// The libraries and the loader, by absolute path, in `ldd`'s order.
    Dynamic(Vec<PathBuf>),
}

/// Parses glibc `ldd` output. Lines have three shapes:
/// `libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)` (a library),
/// `/lib64/ld-linux-x86-64.so.2 (0x...)` (the loader) and
/// `linux-vdso.so.1 (0x...)` (provided by the kernel: nothing to copy).
/// A static program gives `statically linked` or `not a dynamic executable`.
fn parse_ldd(listing: &str) -> Result<Linkage, String> {
    let mut libraries = Vec::new();
    for line in listing.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line == "statically linked" || line == "not a dynamic executable" {
            return Ok(Linkage::Static);
        }
        let (name, target) = match line.split_once("=>") {
            Some((name, target)) => (name.trim(), target.trim()),
            None => (line, line),
        };
        if target.starts_with("not found") {
            return Err(format!("library {name} not found"));
        }
        // The path ends at the load address, " (0x...)".
        let path = target.rsplit_once(" (").map_or(target, |(path, _)| path).trim();
        if path.starts_with('/') {
            libraries.push(PathBuf::from(path));
        } else if !path.is_empty() && !path.starts_with('(') && target != line {
            return Err(format!("unexpected ldd line {line:?}"));
        }
    }
    if libraries.is_empty() {
        return Err(format!("ldd listed no libraries:\n{listing}"));
    }
    Ok(Linkage::Dynamic(libraries))
}

impl From<io::Error> for Error {
    fn from(source: io::Error) -> Self {
        Error::Io { context: "writing the initramfs".into(), source }
    }
}

/// The guest's `/init`. Kernel-owned controllers come from `rig.kernel=` on
/// the command line; everything else of class 0x010802 goes to vfio-pci.
const INIT_SCRIPT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin:/sbin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
fail() { echo "rig: $*"; echo "rig: exit status 125"; /bin/rig-exit 125; poweroff -f; }
for m in irqbypass vfio vfio_iommu_type1 vfio_virqfd vfio-pci-core vfio-pci $(cat /rig/modules/extra); do
    insmod /rig/modules/$m.ko || fail "insmod $m failed"
done
kernel_owned= ; hugepages=0
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        rig.kernel=*) kernel_owned=",${arg#rig.kernel=}," ;;
        rig.hugepages=*) hugepages=${arg#rig.hugepages=} ;;
    esac
done
echo "$hugepages" > /proc/sys/vm/nr_hugepages
for dev in /sys/bus/pci/devices/*; do
    [ "$(cat $dev/class)" = 0x010802 ] || continue
    bdf=${dev##*/}
    case "$kernel_owned" in *",$bdf,"*) continue ;; esac
    [ -e $dev/driver ] && echo "$bdf" > $dev/driver/unbind
    echo vfio-pci > $dev/driver_override
    echo "$bdf" > /sys/bus/pci/drivers_probe
    [ "$(basename "$(readlink $dev/driver)")" = vfio-pci ] || fail "$bdf did not bind to vfio-pci"
done
# Kernel-owned controllers probe asynchronously: wait (bounded) for their
# block devices, then link /dev/ctrlNn1 to controller N's first namespace
# (the kernel's own nvmeX numbering follows probe order, not slot order).
for bdf in $(echo "$kernel_owned" | tr , ' '); do
    tries=0
    until ls -d /sys/bus/pci/devices/$bdf/nvme/nvme*/nvme*n1 >/dev/null 2>&1; do
        tries=$((tries + 1)); [ $tries -gt 300 ] && fail "kernel nvme driver did not bring up $bdf"
        sleep 0.1
    done
    slot=${bdf#0000:00:}; slot=${slot%.0}
    ns=$(basename $(ls -d /sys/bus/pci/devices/$bdf/nvme/nvme*/nvme*n1 | head -n 1))
    ln -s /dev/$ns /dev/ctrl$(( 0x$slot - 0x10 ))n1
done
echo "rig: ready"
cd /tmp
sh /rig/command.sh > /dev/ttyS1 2>&1 < /dev/null
status=$?
sync
echo "rig: exit status $status"
/bin/rig-exit $status
poweroff -f
"#;

/// Wraps `on_line` so that lines carrying a QMP action's marker send its
/// commands (each action once).
fn qmp_observer(on_line: Option<LineObserver>, actions: &[QmpAction], socket: &Path) -> Option<LineObserver> {
    if actions.is_empty() {
        return on_line;
    }
    let pending = Mutex::new(actions.to_vec());
    let socket = socket.to_path_buf();
    Some(LineObserver(Arc::new(move |line: &str| {
        let due: Vec<QmpAction> = {
            let mut pending = pending.lock().unwrap_or_else(|p| p.into_inner());
            let (due, rest) = pending.drain(..).partition(|action: &QmpAction| line.contains(&action.marker));
            *pending = rest;
            due
        };
        for action in due {
            match qmp_send(&socket, &action.commands) {
                Ok(replies) => replies.iter().for_each(|reply| eprintln!("rig: qmp {reply}")),
                Err(error) => eprintln!("rig: qmp failed: {error}"),
            }
        }
        if let Some(LineObserver(observer)) = &on_line {
            observer(line);
        }
    })))
}

/// Connects to QEMU's QMP socket, negotiates capabilities and sends each
/// command, returning each reply line (events are skipped). Every read is
/// bounded by a 10 s timeout.
fn qmp_send(socket: &Path, commands: &[String]) -> io::Result<Vec<String>> {
    let stream = std::os::unix::net::UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let reply = |reader: &mut BufReader<std::os::unix::net::UnixStream>| -> io::Result<String> {
        for _ in 0..64 {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "QMP closed"));
            }
            if !line.contains("\"event\"") {
                return Ok(line.trim().to_string());
            }
        }
        Err(io::Error::other("no QMP reply among 64 events"))
    };
    reply(&mut reader)?; // the greeting
    writer.write_all(b"{\"execute\":\"qmp_capabilities\"}\n")?;
    reply(&mut reader)?;
    let mut replies = Vec::new();
    for command in commands {
        writer.write_all(command.as_bytes())?;
        writer.write_all(b"\n")?;
        replies.push(format!("{command} -> {}", reply(&mut reader)?));
    }
    Ok(replies)
}

/// The guest command as a shell script line, each word single-quoted.
fn shell_command<S: AsRef<str>>(command: &[S]) -> String {
    let words: Vec<String> = command.iter().map(|w| format!("'{}'", w.as_ref().replace('\'', r"'\''"))).collect();
    format!("exec {}\n", words.join(" "))
}

fn collect_output(stdout: impl Read, stream: bool, on_line: Option<LineObserver>) -> String {
    let mut reader = BufReader::new(stdout);
    let mut all = String::new();
    let mut line = Vec::new();
    let mut out = io::stdout();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                line.retain(|&b| b != b'\r');
                let text = String::from_utf8_lossy(&line);
                if stream {
                    let _ = out.write_all(text.as_bytes());
                    let _ = out.flush();
                }
                if let Some(LineObserver(observer)) = &on_line {
                    observer(text.trim_end_matches('\n'));
                }
                all.push_str(&text);
            }
        }
    }
    all
}

/// What a host command printed and how it ended.
#[derive(Debug, Clone)]
pub struct HostOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs a host command with stdin closed and waits for it at most
/// `timeout`; one still running then is killed and reported as an
/// `Error::Io` of kind `TimedOut`. Output is read as it comes, so a chatty
/// command cannot block on a full pipe.
pub fn host_command(command: &mut Command, timeout: Duration) -> Result<HostOutput, Error> {
    let program = command.get_program().to_string_lossy().into_owned();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io_error(format!("starting {program}")))?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out_reader = thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err_reader = thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let exit = wait_bounded(&mut child, timeout, &format!("waiting for {program}"))?;
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    match exit {
        Some(status) => Ok(HostOutput { status, stdout, stderr }),
        None => Err(Error::Io {
            context: format!("running {program}"),
            source: io::Error::new(
                io::ErrorKind::TimedOut,
                format!("did not finish in {} s and was killed", timeout.as_secs()),
            ),
        }),
    }
}

/// Waits for `child` at most `timeout`; kills it and returns `None` past that.
fn wait_bounded(child: &mut Child, timeout: Duration, context: &str) -> Result<Option<ExitStatus>, Error> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().map_err(io_error(context))? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Lines of the guest console and of the command's output a failed run's
/// error keeps.
const TAIL_LINES: usize = 40;

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A scratch directory removed on drop.
struct WorkDir {
    path: PathBuf,
}

impl WorkDir {
    fn new() -> Result<Self, Error> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "vm-rig-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&path).map_err(io_error(format!("creating {}", path.display())))?;
        Ok(WorkDir { path })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// A signal's name, for the few a crashing or killed QEMU dies by.
fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        _ => "another signal",
    }
}

/// `program args...` as one shell line, each word quoted where it needs it.
fn shell_words(program: &Path, args: &[String]) -> String {
    let quote = |word: &str| {
        if !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_=.,/:+@".contains(&b)) {
            word.to_string()
        } else {
            format!("'{}'", word.replace('\'', "'\\''"))
        }
    };
    std::iter::once(program.display().to_string())
        .chain(args.iter().cloned())
        .map(|w| quote(&w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The QEMU to run: `RIG_QEMU` (a path) when set, else
/// `qemu-system-x86_64` from `PATH` (hack/deps installs it). `RIG_QEMU`
/// lets one compare versions, or run a build with symbols, without
/// touching the system's.
fn qemu_binary() -> Result<PathBuf, Error> {
    match std::env::var_os("RIG_QEMU") {
        Some(path) if !path.is_empty() => {
            let path = PathBuf::from(path);
            if path.is_file() {
                Ok(path)
            } else {
                Err(Error::Missing(format!("RIG_QEMU={}: no such file", path.display())))
            }
        }
        _ => which("qemu-system-x86_64").ok_or_else(|| Error::Missing("qemu-system-x86_64 not found".into())),
    }
}

/// `RIG_QEMU_ARGS`, split at whitespace, appended to every VM's QEMU
/// command line: for diagnostics such as `-trace pci_nvme_*` (with
/// `-D FILE`). Empty when unset.
fn extra_qemu_args() -> Vec<String> {
    std::env::var("RIG_QEMU_ARGS").map(|args| args.split_whitespace().map(str::to_string).collect()).unwrap_or_default()
}

/// One of a machine-wide set of VM slots (a file lock), so parallel tests
/// don't run more TCG guests than the host has cores for. `RIG_JOBS` sets
/// the number of slots (default: host cores / 2, at least 1).
struct VmSlot {
    _file: File,
}

impl VmSlot {
    const WAIT_LIMIT: Duration = Duration::from_secs(3600);

    fn acquire() -> Result<Self, Error> {
        let slots = std::env::var("RIG_JOBS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or_else(|| thread::available_parallelism().map(|n| n.get() / 2).unwrap_or(1));
        let slots = slots.max(1);
        let dir = workspace_root().join("target").join("vm-rig");
        fs::create_dir_all(&dir).map_err(io_error(format!("creating {}", dir.display())))?;
        let started = Instant::now();
        loop {
            for slot in 0..slots {
                let path = dir.join(format!("slot{slot}.lock"));
                let file = File::options()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&path)
                    .map_err(io_error(format!("opening {}", path.display())))?;
                // SAFETY: flock on a file descriptor we own; no memory is involved.
                let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
                if rc == 0 {
                    return Ok(VmSlot { _file: file });
                }
            }
            if started.elapsed() > Self::WAIT_LIMIT {
                return Err(Error::Spec(format!("no free VM slot in {} s", Self::WAIT_LIMIT.as_secs())));
            }
            thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The workspace root (this crate lives in `hack/rig`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|dir| Path::new(dir).join(program)).find(|path| path.is_file())
}

/// The guest kernel image and the vfio modules to load, by name.
#[derive(Debug, Clone)]
struct Kernel {
    image: PathBuf,
    modules: Vec<(String, PathBuf)>,
    /// Requested modules and their dependencies, dependencies first.
    extra_modules: Vec<(String, PathBuf)>,
    module_root: PathBuf,
}

/// Finds the newest `/boot/vmlinuz-*cloud-amd64` and its vfio modules.
fn find_kernel() -> Result<Kernel, Error> {
    let mut versions: Vec<String> = fs::read_dir("/boot")
        .map_err(io_error("reading /boot"))?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter_map(|name| name.strip_prefix("vmlinuz-").map(str::to_owned))
        .filter(|version| version.ends_with("cloud-amd64"))
        .collect();
    versions.sort_by_key(|v| version_key(v));
    let version = versions
        .pop()
        .ok_or_else(|| Error::Missing("no /boot/vmlinuz-*cloud-amd64 (package linux-image-cloud-amd64)".into()))?;
    let module_root = PathBuf::from(format!("/lib/modules/{version}/kernel"));
    let mut found = Vec::new();
    find_files(&module_root, &mut found);
    let modules = VFIO_MODULES
        .iter()
        .map(|name| {
            found
                .iter()
                .find(|path| path.file_name().and_then(|n| n.to_str()) == Some(&format!("{name}.ko")))
                .map(|path| (name.to_string(), path.clone()))
                .ok_or_else(|| {
                    Error::Missing(format!("uncompressed module {name}.ko not found under {}", module_root.display()))
                })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(Kernel {
        image: PathBuf::from(format!("/boot/vmlinuz-{version}")),
        modules,
        extra_modules: Vec::new(),
        module_root,
    })
}

/// `names` and what they depend on (`modinfo -F depends`), dependencies
/// first, without the vfio modules the guest loads anyway.
fn resolve_modules(kernel: &Kernel, names: &[String]) -> Result<Vec<(String, PathBuf)>, Error> {
    let mut all = Vec::new();
    find_files(&kernel.module_root, &mut all);
    let find = |name: &str| -> Result<PathBuf, Error> {
        let wanted: Vec<String> = vec![
            format!("{name}.ko"),
            format!("{}.ko", name.replace('_', "-")),
            format!("{}.ko", name.replace('-', "_")),
        ];
        all.iter()
            .find(|path| path.file_name().and_then(|n| n.to_str()).is_some_and(|n| wanted.iter().any(|w| w == n)))
            .cloned()
            .ok_or_else(|| {
                Error::Missing(format!(
                    "uncompressed module {name}.ko not found under {}",
                    kernel.module_root.display()
                ))
            })
    };
    let modinfo = which("modinfo").ok_or_else(|| Error::Missing("modinfo not found (package kmod)".into()))?;
    let mut ordered: Vec<(String, PathBuf)> = Vec::new();
    // Depth-first: a module after everything it depends on.
    fn visit(
        name: &str,
        find: &dyn Fn(&str) -> Result<PathBuf, Error>,
        modinfo: &Path,
        ordered: &mut Vec<(String, PathBuf)>,
        depth: usize,
    ) -> Result<(), Error> {
        if ordered.iter().any(|(n, _)| n == name) || VFIO_MODULES.contains(&name) {
            return Ok(());
        }
        if depth > 32 {
            return Err(Error::Spec(format!("module dependencies too deep at {name}")));
        }
        let path = find(name)?;
        let output = host_command(Command::new(modinfo).args(["-F", "depends"]).arg(&path), LDD_TIMEOUT)?;
        for dependency in output.stdout.trim().split(',').filter(|d| !d.is_empty()) {
            visit(dependency, find, modinfo, ordered, depth + 1)?;
        }
        ordered.push((name.to_owned(), path));
        Ok(())
    }
    for name in names {
        visit(name, &find, &modinfo, &mut ordered, 0)?;
    }
    Ok(ordered)
}

fn version_key(version: &str) -> Vec<u64> {
    version.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse().ok()).collect()
}

fn find_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            find_files(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn find_busybox() -> Result<PathBuf, Error> {
    ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
        .ok_or_else(|| Error::Missing("busybox not found (package busybox-static)".into()))
}

/// Builds the static guest binaries once per process: every tool of
/// `nvme-examples` and `rig-exit`.
pub fn guest_binaries() -> Result<&'static [PathBuf], Error> {
    static BUILT: OnceLock<Result<Vec<PathBuf>, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            build_guest_binaries().map_err(|e| match e {
                Error::Build(message) => message,
                other => other.to_string(),
            })
        })
        .as_ref()
        .map(Vec::as_slice)
        .map_err(|e| Error::Build(e.clone()))
}

/// The host target triple; static glibc binaries need an explicit target so
/// `crt-static` does not reach build scripts and proc macros.
const GUEST_TARGET: &str = "x86_64-unknown-linux-gnu";

/// The cargo profile the guest binaries are built with: `guest` (fat LTO,
/// what `hack/run` and `hack/bench` measure), or `guest-test` when
/// `RIG_GUEST_PROFILE` says so (no LTO, many code generation units: the
/// same source, built in about half the time; `hack/test` uses it, since its
/// QEMU tests judge results, not speed).
fn guest_profile() -> Result<String, Error> {
    parse_guest_profile(std::env::var("RIG_GUEST_PROFILE"))
}

fn parse_guest_profile(value: Result<String, std::env::VarError>) -> Result<String, Error> {
    match value {
        Err(std::env::VarError::NotPresent) => Ok("guest".into()),
        Ok(profile) if profile == "guest" || profile == "guest-test" => Ok(profile),
        Ok(other) => Err(Error::Spec(format!("RIG_GUEST_PROFILE={other}: expected guest or guest-test"))),
        Err(std::env::VarError::NotUnicode(_)) => Err(Error::Spec("RIG_GUEST_PROFILE is not UTF-8".into())),
    }
}

fn build_guest_binaries() -> Result<Vec<PathBuf>, Error> {
    let profile = guest_profile()?;
    let root = workspace_root();
    // A separate target directory: RUSTFLAGS differ from host builds, and a
    // `cargo test` that calls this must not wait on its own build lock.
    let target_dir = root.join("target").join("guest");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .current_dir(&root)
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .env("CARGO_TARGET_DIR", &target_dir)
        .args(["build", "--quiet", "--profile", &profile, "--target", GUEST_TARGET])
        .args(["-p", "nvme-examples", "-p", "rig-guest", "--bins"])
        .stdin(Stdio::null())
        .output()
        .map_err(io_error("running cargo build for the guest"))?;
    if !output.status.success() {
        return Err(Error::Build(String::from_utf8_lossy(&output.stderr).into_owned()));
    }
    let bin_dir = target_dir.join(GUEST_TARGET).join(&profile);
    let mut binaries = Vec::new();
    for entry in fs::read_dir(&bin_dir).map_err(io_error(format!("reading {}", bin_dir.display())))?.flatten() {
        let path = entry.path();
        let is_exe = entry.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false);
        let plain_name = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| !n.contains('.'));
        if is_exe && plain_name {
            binaries.push(path);
        }
    }
    if !binaries.iter().any(|p| p.ends_with("rig-exit")) {
        return Err(Error::Build(format!("rig-exit missing from {}", bin_dir.display())));
    }
    Ok(binaries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guest_profile_is_guest_unless_set_and_anything_else_is_refused() {
        assert_eq!(parse_guest_profile(Err(std::env::VarError::NotPresent)).unwrap(), "guest");
        assert_eq!(parse_guest_profile(Ok("guest-test".into())).unwrap(), "guest-test");
        let error = parse_guest_profile(Ok("release".into())).unwrap_err();
        assert!(matches!(&error, Error::Spec(m) if m.contains("RIG_GUEST_PROFILE=release")), "{error}");
    }

    #[test]
    fn guest_addresses_follow_the_slots() {
        for (index, bdf) in GUEST_BDFS.iter().enumerate() {
            assert_eq!(*bdf, format!("0000:00:{:02x}.0", usize::from(FIRST_SLOT) + index));
        }
    }

    #[test]
    fn an_outcome_tells_checks_details_and_what_is_missing() {
        let outcome = Outcome {
            status: 0,
            output: "tool: a one: ok (1 thing)\ntool: a ok\n".into(),
            console: (0..40).map(|n| format!("c{n}\n")).collect(),
            elapsed: Duration::from_secs(2),
        };
        assert_eq!(outcome.detail("tool", "a", "one"), "1 thing");
        assert_eq!(outcome.missing_checks("tool", "a", &["one"]), Vec::<String>::new());
        assert_eq!(outcome.missing_checks("tool", "a", &["two"]), ["tool: a two: ok ("]);
        assert_eq!(outcome.missing_checks("tool", "b", &[]), ["tool: b ok"]);
        let report = outcome.report();
        assert!(report.contains("c39") && report.contains("c10") && !report.contains("c9\n"), "{report}");
    }

    #[test]
    fn shell_command_quotes_every_word() {
        assert_eq!(shell_command(&["sh", "-c", "echo 'hi' $X"]), "exec 'sh' '-c' 'echo '\\''hi'\\'' $X'\n");
    }

    #[test]
    fn kernel_cmdline_blacklists_nvme_only_without_kernel_controllers() {
        let vm = Vm::new().controller(Controller::nvme(1 << 30));
        assert!(vm.kernel_cmdline().contains("initcall_blacklist=nvme_init"));
        let vm = vm.controller(Controller::nvme(1 << 30).kernel());
        let cmdline = vm.kernel_cmdline();
        assert!(!cmdline.contains("initcall_blacklist"));
        assert!(cmdline.contains("rig.kernel=0000:00:11.0"), "{cmdline}");
    }

    #[test]
    fn kernel_cmdline_appends_extra_arguments_last() {
        let vm = Vm::new().append("nvme.poll_queues=1").append("  ").append(" loglevel=4 mitigations=off ");
        let cmdline = vm.kernel_cmdline();
        assert!(cmdline.ends_with(" nvme.poll_queues=1 loglevel=4 mitigations=off"), "{cmdline}");
        check_cmdline(&cmdline).unwrap();
    }

    #[test]
    fn kernel_cmdline_limits_are_checked() {
        assert!(check_cmdline(&"x".repeat(KERNEL_CMDLINE_MAX_BYTES - 1)).is_ok());
        assert!(check_cmdline(&"x".repeat(KERNEL_CMDLINE_MAX_BYTES)).is_err());
        assert!(check_cmdline("quiet\ninit=/bin/sh").is_err());
        let vm = Vm::new().append("a".repeat(KERNEL_CMDLINE_MAX_BYTES));
        assert!(matches!(vm.run(&["true"]), Err(Error::Spec(_))));
    }

    /// `ldd /usr/bin/fio` on Debian 12, shortened.
    const LDD_FIO: &str = "\tlinux-vdso.so.1 (0x00007ffd5a9e8000)
\tlibnuma.so.1 => /lib/x86_64-linux-gnu/libnuma.so.1 (0x00007f72929f7000)
\tlibaio.so.1 => /lib/x86_64-linux-gnu/libaio.so.1 (0x00007f72928f3000)
\tlibceph-common.so.2 => /usr/lib/x86_64-linux-gnu/ceph/libceph-common.so.2 (0x00007f7288600000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f729181e000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f7292a1a000)
";

    #[test]
    fn parse_ldd_lists_libraries_and_the_loader() {
        let want: Vec<PathBuf> = [
            "/lib/x86_64-linux-gnu/libnuma.so.1",
            "/lib/x86_64-linux-gnu/libaio.so.1",
            "/usr/lib/x86_64-linux-gnu/ceph/libceph-common.so.2",
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib64/ld-linux-x86-64.so.2",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(parse_ldd(LDD_FIO), Ok(Linkage::Dynamic(want)));
    }

    #[test]
    fn parse_ldd_knows_static_programs_and_missing_libraries() {
        assert_eq!(parse_ldd("\tstatically linked\n"), Ok(Linkage::Static));
        assert_eq!(parse_ldd("\tnot a dynamic executable\n"), Ok(Linkage::Static));
        // Older glibc printed the vDSO with an empty target.
        assert_eq!(
            parse_ldd("\tlinux-vdso.so.1 =>  (0x00007ffd)\n\t/lib64/ld-linux-x86-64.so.2 (0x1)\n"),
            Ok(Linkage::Dynamic(vec![PathBuf::from("/lib64/ld-linux-x86-64.so.2")]))
        );
        let missing = parse_ldd("\tlibgone.so.3 => not found\n\tlibc.so.6 => /lib/libc.so.6 (0x1)\n");
        assert_eq!(missing, Err("library libgone.so.3 not found".into()));
        assert!(parse_ldd("").is_err());
        assert!(parse_ldd("\tlibx.so => relative/libx.so (0x1)\n").is_err());
    }

    #[test]
    fn host_files_keep_their_paths_with_parents_first() {
        assert_eq!(
            guest_path(Path::new("/usr/lib/x86_64-linux-gnu/libz.so.1")).unwrap(),
            "usr/lib/x86_64-linux-gnu/libz.so.1"
        );
        assert!(guest_path(Path::new("lib/libz.so.1")).is_err());
        assert!(guest_path(Path::new("/lib/../etc/passwd")).is_err());
        assert_eq!(parent_dirs("usr/lib/x86_64-linux-gnu/libz.so.1"), ["usr", "usr/lib", "usr/lib/x86_64-linux-gnu"]);
        assert!(parent_dirs("init").is_empty());
    }

    /// Runs the host's `ldd`: the rig finds a dynamically linked program's
    /// loader and C library (any Debian host has /bin/sh as dash).
    #[test]
    fn host_program_files_follow_ldd() {
        let files = host_program_files(Path::new("/bin/sh")).unwrap();
        assert_eq!(files[0], Path::new("/bin/sh"));
        assert!(files.iter().any(|f| f.to_string_lossy().contains("libc.so")), "{files:?}");
        assert!(matches!(host_program_files(Path::new("/nonexistent/program")), Err(Error::Missing(_))));
    }

    #[test]
    fn version_key_orders_numerically() {
        let mut versions = ["6.1.0-9-cloud-amd64", "6.1.0-57-cloud-amd64", "6.1.0-10-cloud-amd64"];
        versions.sort_by_key(|v| version_key(v));
        assert_eq!(versions.last(), Some(&"6.1.0-57-cloud-amd64"));
    }
}
