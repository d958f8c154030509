"""``available()``, ``info()`` and ``diagnose()``: what this host's libfabric can do, and why not.

None of these raise: a missing library, missing headers or a failed build come back as
reasons. ``diagnose()`` runs the two real opens a client would run, plain RMA and RMA
with ``FI_HMEM`` (device memory), and explains for each provider libfabric lists why it
would or would not match.
"""

from __future__ import annotations

import os
from typing import Any

from dataio.rdma._build import Shim, ShimUnavailable, load
from dataio.rdma._discovery import ENV_LIBRARY, Library, find_library
from dataio.rdma._fabric import (
    FALLBACK_PROVIDERS,
    LOCAL_ONLY_PROVIDERS,
    Candidate,
    Endpoint,
    choose,
    getinfo,
    make_hints,
    mr_mode_names,
    supported_mr_mode,
)

__all__ = ["available", "diagnose", "info"]

# Providers that mean real RDMA hardware; named in diagnose() when absent.
NIC_PROVIDERS = ("efa", "verbs;ofi_rxm", "cxi", "psm3", "opx", "psm2")


def _shim(library: Library) -> tuple[Shim | None, str | None]:
    if not library.found:
        return None, f"libfabric not found: {library.why}"
    try:
        return load(library), None
    except ShimUnavailable as exc:
        return None, str(exc)


def _provider_entry(shim: Shim, candidate: Candidate) -> dict[str, Any]:
    lib = shim.lib
    return {
        "name": candidate.provider,
        "fabric": candidate.fabric,
        "domain": candidate.domain,
        "rma": bool(candidate.caps & lib.FI_RMA),
        "hmem": bool(candidate.caps & lib.FI_HMEM),
        "mr_mode": mr_mode_names(shim, candidate.mr_mode),
        "max_msg_size": candidate.max_msg_size,
        "tx_size": candidate.tx_size,
    }


def _matches(shim: Shim, *, hmem: bool) -> tuple[int, list[Candidate]]:
    hints = make_hints(shim, provider=None, hmem=hmem)
    with getinfo(shim, hints) as (rc, entries):
        return rc, [candidate for candidate, _ in entries]


def _unique(candidates: list[Candidate]) -> list[Candidate]:
    seen: set[tuple[str, str, str]] = set()
    out = []
    for candidate in candidates:
        key = (candidate.provider, candidate.fabric, candidate.domain)
        if key not in seen:
            seen.add(key)
            out.append(candidate)
    return out


def _try_open(shim: Shim, candidates: list[Candidate], *, hmem: bool) -> tuple[str | None, str]:
    """Open an endpoint on the provider a client would pick; return (provider, detail)."""
    if not candidates:
        return None, "no provider matched"
    name = choose([(c, None) for c in candidates], None)[0].provider
    try:
        endpoint = Endpoint(shim, provider=name, hmem=hmem)
    except Exception as exc:  # diagnose() reports, never raises
        return None, f"{name} matched but opening it failed: {exc}"
    try:
        detail = f"{name} opened on {endpoint.candidate.fabric} ({_addressing(shim, endpoint)})"
    finally:
        endpoint.close()
    return name, detail


def _addressing(shim: Shim, endpoint: Endpoint) -> str:
    modes = mr_mode_names(shim, endpoint.mr_mode)
    return "mr_mode " + (
        "|".join(modes) if modes else "0: offset addressing, keys chosen by dataio"
    )


def available() -> bool:
    """Whether an RMA provider can be opened here (a fallback counts; no RDMA proof).

    Example::

        if rdma.available():
            server = rdma.serve(bind="127.0.0.1:0", buffer_size=1 << 20)
    """
    shim, _ = _shim(find_library())
    if shim is None:
        return False
    rc, candidates = _matches(shim, hmem=False)
    return rc == 0 and _try_open(shim, candidates, hmem=False)[0] is not None


def info() -> dict[str, Any]:
    """The library, the shim and the RMA providers found, as a dict.

    Keys: ``available``, ``library``, ``version``, ``shim`` (``built``, ``path``,
    ``headers``), ``providers`` (one dict per provider and fabric: ``name``,
    ``fabric``, ``domain``, ``rma``, ``hmem``, ``mr_mode``, ...), ``default_provider``
    and ``why`` (set when not available).

    Example::

        print([p["name"] for p in rdma.info()["providers"]])
    """
    library = find_library()
    shim, why = _shim(library)
    out: dict[str, Any] = {
        "available": False,
        "library": library.path,
        "version": library.version_text,
        "shim": {"built": shim is not None, "path": shim.path if shim else None},
        "providers": [],
        "default_provider": None,
        "why": why,
    }
    if shim is None:
        return out
    out["shim"]["headers"] = shim.header_version
    rc, candidates = _matches(shim, hmem=False)
    out["providers"] = [_provider_entry(shim, c) for c in _unique(candidates)]
    opened, detail = _try_open(shim, candidates, hmem=False)
    out["available"] = opened is not None
    out["default_provider"] = opened
    if opened is None:
        out["why"] = f"fi_getinfo: {detail}" if rc == 0 else f"fi_getinfo failed ({rc})"
    return out


def _reasons(shim: Shim, everything: list[Candidate], matched: list[Candidate], *, hmem: bool):
    """One reason per provider name: why it would or would not match the hints."""
    lib = shim.lib
    supported = supported_mr_mode(shim, hmem=hmem)
    matched_names = {c.provider for c in matched}
    names = list(dict.fromkeys(c.provider for c in everything))
    reasons: dict[str, str] = {}
    for name in names:
        entries = [c for c in everything if c.provider == name]
        rdm = [c for c in entries if c.ep_type == lib.FI_EP_RDM]
        rma = [c for c in rdm if c.caps & lib.FI_RMA]
        with_hmem = [c for c in rma if c.caps & lib.FI_HMEM]
        local = " (intra-host only)" if name in LOCAL_ONLY_PROVIDERS else ""
        if name in matched_names:
            example = next(c for c in matched if c.provider == name)
            modes = "|".join(mr_mode_names(shim, example.mr_mode)) or "0 (offset addressing)"
            reasons[name] = f"matches{local}: FI_EP_RDM with FI_RMA, mr_mode {modes}"
        elif not rdm:
            reasons[name] = "no reliable-datagram endpoint (FI_EP_RDM)"
        elif not rma:
            reasons[name] = "its FI_EP_RDM endpoints lack one-sided RMA (FI_RMA)"
        elif hmem and not with_hmem:
            reasons[name] = "no device-memory support (FI_HMEM capability absent)"
        else:
            required = rma[0].mr_mode & ~supported & ~(lib.FI_MR_BASIC | lib.FI_MR_SCALABLE)
            if required:
                modes = "|".join(mr_mode_names(shim, required))
                reasons[name] = f"requires memory-registration modes dataio does not use: {modes}"
            else:
                reasons[name] = "listed, but fi_getinfo rejected our hints (attribute mismatch)"
    for name in NIC_PROVIDERS:
        reasons.setdefault(
            name, "not offered by this libfabric (no such device, or the build lacks it)"
        )
    return reasons


def _cuda_status() -> dict[str, Any]:
    from dataio._native import cuda as _cuda

    return _cuda()


def diagnose() -> dict[str, Any]:
    """Run the real plain-RMA and HMEM opens; explain per provider why each (mis)matches.

    Returns a dict with ``library``, ``shim``, ``plain`` and ``hmem`` (each: ``ok``,
    ``opened``, ``detail``, ``providers``: name -> reason), ``cuda`` and ``summary``: a
    list of lines for people.

    Example::

        for line in rdma.diagnose()["summary"]:
            print(line)
    """
    library = find_library()
    cuda = _cuda_status()
    cuda_line = (
        f"CUDA: {cuda.get('devices', 0)} device(s)"
        if cuda["found"]
        else f"CUDA: none ({cuda.get('why')})"
    )
    out: dict[str, Any] = {
        "library": {"path": library.path, "version": library.version_text, "why": library.why},
        "shim": None,
        "plain": {"ok": False, "opened": None, "detail": None, "providers": {}},
        "hmem": {"ok": False, "opened": None, "detail": None, "providers": {}},
        "cuda": cuda,
        "summary": [],
    }
    summary: list[str] = out["summary"]
    if not library.found:
        summary += [
            f"libfabric: not found; {library.why}",
            "plain RMA: impossible without libfabric (rdma.serve / rdma.connect will fail)",
            "HMEM (GPUDirect): impossible without libfabric",
            cuda_line,
        ]
        out["plain"]["detail"] = out["hmem"]["detail"] = "libfabric not found"
        return out
    source = f"${ENV_LIBRARY}" if os.environ.get(ENV_LIBRARY) else "the loader"
    summary.append(f"libfabric {library.version_text} at {library.path} (found via {source})")
    shim, why = _shim(library)
    if shim is None:
        out["shim"] = {"built": False, "why": why}
        summary += [
            f"shim: unavailable; {why}",
            "plain RMA: cannot be tried without the shim",
            "HMEM (GPUDirect): cannot be tried without the shim",
            cuda_line,
        ]
        return out
    out["shim"] = {"built": True, "path": shim.path, "headers": shim.header_version}
    summary.append(f"shim: built against libfabric {shim.header_version} headers ({shim.path})")
    if os.environ.get("FI_PROVIDER"):
        summary.append(f"FI_PROVIDER={os.environ['FI_PROVIDER']} limits what libfabric lists")
    everything = _list_all(shim)
    for kind, hmem in (("plain", False), ("hmem", True)):
        rc, matched = _matches(shim, hmem=hmem)
        section = out[kind]
        section["providers"] = _reasons(shim, everything, matched if rc == 0 else [], hmem=hmem)
        opened, detail = _try_open(shim, matched if rc == 0 else [], hmem=hmem)
        section.update(ok=opened is not None, opened=opened, detail=detail)
        title = "plain RMA" if kind == "plain" else "HMEM (GPUDirect)"
        verdict = f"OK, {detail}" if opened else f"no match; {detail}"
        summary.append(f"{title}: {verdict}")
        for name, reason in section["providers"].items():
            summary.append(f"  {name}: {reason}")
    summary.append(cuda_line)
    summary.append(_verdict(out, cuda))
    return out


def _list_all(shim: Shim) -> list[Candidate]:
    with getinfo(shim, shim.ffi.NULL) as (rc, entries):
        return [candidate for candidate, _ in entries] if rc == 0 else []


def _verdict(out: dict[str, Any], cuda: dict[str, Any]) -> str:
    plain, hmem = out["plain"], out["hmem"]
    if not plain["ok"]:
        return "verdict: rdma.connect() cannot work here; see the reasons above"
    kind = "a software fallback, not physical RDMA" if plain["opened"] in FALLBACK_PROVIDERS else ""
    line = f"verdict: rdma.connect() works over {plain['opened']}"
    line += f" ({kind})" if kind else ""
    if not cuda["found"]:
        return line + "; cuda=True will fail: no CUDA device"
    if not hmem["ok"]:
        return line + "; cuda=True will fail: no provider offers FI_HMEM"
    if hmem["opened"] in LOCAL_ONLY_PROVIDERS:
        return line + f"; cuda=True only through {hmem['opened']}, which is intra-host"
    return line + f"; cuda=True can use {hmem['opened']}"
