//! The Docker engine as a user sees it, through the `docker` CLI: what Halyard made, and
//! things done to it behind Halyard's back.

use std::process::Command;

/// Runs `docker args...`; its trimmed standard output, or a panic saying what failed.
pub fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("run the docker CLI (infra/docker-up.sh installs it)");
    assert!(out.status.success(), "docker {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Fails the test unless an engine answers: Docker tests run everywhere the suite runs,
/// CI included (`.ci/run` starts dockerd and builds the base image).
pub fn require_engine() {
    let ok = Command::new("docker").args(["image", "inspect", "halyard-base:bookworm"]).output().is_ok_and(|o| o.status.success());
    assert!(ok, "Docker tests need a running engine with halyard-base:bookworm: run infra/docker-up.sh and infra/build-base-image.sh");
}

/// Ids of a deployment's containers (all states), optionally only those with `label`.
pub fn containers(deployment: &str, label: Option<&str>) -> Vec<String> {
    let filter = format!("label=dev.halyard.deployment={deployment}");
    let mut args = vec!["ps", "-aq", "--no-trunc", "--filter", &filter];
    let extra;
    if let Some(l) = label {
        extra = format!("label={l}");
        args.extend(["--filter", &extra]);
    }
    docker(&args).lines().map(str::to_owned).collect()
}

/// A deployment's volumes.
pub fn volumes(deployment: &str) -> Vec<String> {
    let filter = format!("label=dev.halyard.deployment={deployment}");
    docker(&["volume", "ls", "-q", "--filter", &filter]).lines().map(str::to_owned).collect()
}

/// `docker inspect -f <format> <container>`.
pub fn inspect(container: &str, format: &str) -> String {
    docker(&["inspect", "-f", format, container])
}

/// Removes everything of a deployment (test clean-up; errors ignored).
pub fn remove_deployment(deployment: &str) {
    if deployment.is_empty() {
        return;
    }
    let filter = format!("label=dev.halyard.deployment={deployment}");
    let ids = Command::new("docker").args(["ps", "-aq", "--filter", &filter]).output();
    if let Ok(out) = ids {
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
        if !ids.is_empty() {
            let _ = Command::new("docker").args(["rm", "-f"]).args(&ids).output();
        }
    }
    let vols = Command::new("docker").args(["volume", "ls", "-q", "--filter", &filter]).output();
    if let Ok(out) = vols {
        let vols: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
        if !vols.is_empty() {
            let _ = Command::new("docker").args(["volume", "rm", "-f"]).args(&vols).output();
        }
    }
    // Environment snapshots and dev container images are labelled with the deployment (and the
    // runtime images built from a dev container's inherit the label). An image with children
    // cannot go before them: a second pass takes what the first left.
    for _ in 0..2 {
        let images = Command::new("docker").args(["images", "-q", "--filter", &filter]).output();
        if let Ok(out) = images {
            let images: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
            if !images.is_empty() {
                let _ = Command::new("docker").args(["rmi", "-f"]).args(&images).output();
            }
        }
    }
    let nets = Command::new("docker").args(["network", "ls", "-q", "--filter", &filter]).output();
    if let Ok(out) = nets {
        let nets: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
        if !nets.is_empty() {
            let _ = Command::new("docker").args(["network", "rm"]).args(&nets).output();
        }
    }
    // The `internet` egress rules name the deployment's bridges (`hy<first 8 of its id>-..`).
    let bridge: String = format!("hy{}", deployment.chars().filter(char::is_ascii_alphanumeric).take(8).collect::<String>());
    for chain in ["DOCKER-USER", "INPUT"] {
        let Ok(out) = Command::new("iptables").args(["-w", "-S", chain]).output() else { continue };
        for rule in String::from_utf8_lossy(&out.stdout).lines().filter(|r| r.contains(&bridge)) {
            let args: Vec<&str> = rule.split_whitespace().skip(2).collect();
            let _ = Command::new("iptables").args(["-w", "-D", chain]).args(&args).output();
        }
    }
}
