//! A real Jaeger v2 for the tests (crates/cli/tests/otel.rs, tags_net.rs):
//! started on free loopback ports with tests/otel/jaeger.yaml (in-memory
//! storage), asked through its query API. A test module (`#[path]`), not
//! testsupport: only these two test binaries use it.
#![allow(dead_code)]

use mantle_testsupport::poll_until_for;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn rand_suffix() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// Jaeger v2 as scripts/setup.sh installs it.
pub const JAEGER: &str = "/usr/local/lib/mantle/jaeger-1.76.0";

/// A Jaeger on free loopback ports, in-memory storage.
pub struct Jaeger {
    child: Child,
    pub otlp: u16,
    pub query: u16,
    pub grpc: u16,
    log: PathBuf,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Jaeger, or None outside CI when it is not installed (said on stderr).
pub fn jaeger_for(test: &str) -> Jaeger {
    // The tests that use it are ignored unless asked for (`needs root ...
    // and Jaeger`); asked for, a missing Jaeger is a failure that says so,
    // never a silent pass.
    mantle_testsupport::require(
        &format!("{JAEGER} (bash scripts/setup.sh builds it)"),
        Path::new(JAEGER).exists(),
        &format!("by {test}"),
    );
    Jaeger::start(free_port(), free_port(), free_port())
}

impl Jaeger {
    pub fn start(otlp: u16, query: u16, grpc: u16) -> Jaeger {
        let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otel/jaeger.yaml");
        let log = std::env::temp_dir().join(format!("mantle-jaeger-{}.log", rand_suffix()));
        let child = Command::new(JAEGER)
            .arg("--config")
            .arg(&config)
            .env("MANTLE_JAEGER_OTLP_PORT", otlp.to_string())
            .env("MANTLE_JAEGER_QUERY_PORT", query.to_string())
            .env("MANTLE_JAEGER_GRPC_PORT", grpc.to_string())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let j = Jaeger {
            child,
            otlp,
            query,
            grpc,
            log,
        };
        poll_until_for(Duration::from_secs(30), || {
            (TcpStream::connect(("127.0.0.1", otlp)).is_ok() && j.get("/api/services").is_some())
                .then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "Jaeger did not start: {}",
                std::fs::read_to_string(&j.log).unwrap_or_default()
            )
        });
        j
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.otlp)
    }

    /// GET on the query API: the JSON, if 200.
    pub fn get(&self, path: &str) -> Option<Value> {
        let mut s = TcpStream::connect(("127.0.0.1", self.query)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut b = Vec::new();
        s.read_to_end(&mut b).ok()?;
        let t = String::from_utf8_lossy(&b);
        let (head, body) = t.split_once("\r\n\r\n")?;
        if !head.starts_with("HTTP/1.1 200") {
            return None;
        }
        let body = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            dechunk(body)
        } else {
            body.to_string()
        };
        serde_json::from_str(&body).ok()
    }

    /// The spans of trace `id` (hex), as Jaeger returns them.
    pub fn trace(&self, id: &str) -> Option<Value> {
        let v = self.get(&format!("/api/traces/{id}"))?;
        v["data"].get(0).cloned()
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(&self.log);
    }
}

pub fn dechunk(mut b: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = b.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        b = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Jaeger's tag value of `key` on a span or process.
pub fn jtag<'a>(tags: &'a Value, key: &str) -> Option<&'a Value> {
    tags.as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .map(|t| &t["value"])
}
