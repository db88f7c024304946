"""Signed artifacts: an Ed25519 signature of an artifact's manifest.

The manifest lists the SHA-256 of every file of the artifact (and loading refuses a
directory holding any file it does not list), so a signature of the manifest's bytes
covers the whole artifact: a replaced kernel library with a rehashed manifest no longer
matches the signature. Keys are PEM files (PKCS#8 private key, SubjectPublicKeyInfo
public key), made by :func:`generate_keypair` (``heterocc keygen``); signing and
checking use the ``cryptography`` library's Ed25519.

``verified_manifest`` reads only the manifest and the signature, so an artifact that
is unsigned, or signed by another key, is refused before any of its other files is
read, let alone a library opened.
"""

from __future__ import annotations

import os

from ..errors import ArtifactError, InputError
from .artifact import MANIFEST, SIGNATURE, read_manifest_bytes
from .files import member_path

#: bytes of an Ed25519 signature
SIGNATURE_BYTES = 64


def _crypto():
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:  # a dependency of heterocc: only a broken install lacks it
        raise InputError("signing artifacts needs the 'cryptography' package: pip install "
                         "cryptography") from None
    return ed25519, serialization, InvalidSignature


def generate_keypair(private_path: str, public_path: str) -> None:
    """Write a new Ed25519 key pair: the private key to ``private_path`` (PEM, PKCS#8,
    unencrypted, readable by its owner only) and the public key to ``public_path``
    (PEM). Refuses to overwrite either file."""
    ed25519, serialization, _ = _crypto()
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    for path in (private_path, public_path):
        if os.path.lexists(path):
            raise InputError(f"{path} exists; choose another file for the new key")
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private)
    with open(public_path, "xb") as f:
        f.write(public)


def _read_key_file(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise InputError(f"cannot read the {what} {path}: {exc.strerror}") from None


def load_private_key(path: str):
    """The Ed25519 private key in PEM file ``path`` (InputError for anything else)."""
    ed25519, serialization, _ = _crypto()
    try:
        key = serialization.load_pem_private_key(_read_key_file(path, "private key"),
                                                 password=None)
    except (ValueError, TypeError) as exc:
        raise InputError(f"{path} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise InputError(f"{path} is a {type(key).__name__}; artifacts are signed with "
                         "Ed25519 keys (heterocc keygen)")
    return key


def load_public_key(path: str):
    """The Ed25519 public key in PEM file ``path`` (InputError for anything else)."""
    ed25519, serialization, _ = _crypto()
    try:
        key = serialization.load_pem_public_key(_read_key_file(path, "public key"))
    except (ValueError, TypeError) as exc:
        raise InputError(f"{path} is not a PEM public key: {exc}") from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise InputError(f"{path} is a {type(key).__name__}; artifacts are verified with "
                         "Ed25519 keys (heterocc keygen)")
    return key


def sign_artifact(path: str, private_key: str) -> None:
    """Sign the manifest of the artifact in ``path`` with the key in file
    ``private_key``: writes ``manifest.sig`` (the raw 64-byte signature)."""
    key = load_private_key(private_key)
    signature = key.sign(read_manifest_bytes(path))
    with open(os.path.join(path, SIGNATURE), "wb") as f:
        f.write(signature)


def verified_manifest(path: str, public_key: str) -> bytes:
    """The manifest's bytes of the artifact in ``path`` once its signature checks out
    against the key in file ``public_key``; ArtifactError for an unsigned artifact or
    a signature that does not match (another key, or a changed manifest)."""
    _, _, invalid_signature = _crypto()
    key = load_public_key(public_key)
    text = read_manifest_bytes(path)
    try:
        with open(member_path(path, SIGNATURE), "rb") as f:
            signature = f.read(SIGNATURE_BYTES + 1)
    except FileNotFoundError:
        raise ArtifactError(f"artifact {path} is not signed (no {SIGNATURE}); it was "
                            f"exported without a key, and --verify refuses it") from None
    except OSError as exc:
        raise ArtifactError(f"cannot read {SIGNATURE} of {path}: {exc.strerror}") from None
    if len(signature) != SIGNATURE_BYTES:
        raise ArtifactError(f"{SIGNATURE} of {path} is not an Ed25519 signature "
                            f"({len(signature)} bytes)")
    try:
        key.verify(signature, text)
    except invalid_signature:
        raise ArtifactError(f"the signature of {path}/{MANIFEST} does not match the key "
                            f"{public_key}: the artifact was signed by another key or "
                            "changed after signing") from None
    return text
