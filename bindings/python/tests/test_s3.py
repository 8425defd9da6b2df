"""S3 configured by keyword arguments (s3_endpoint, s3_access_key_id,
s3_secret_access_key, ...), against versitygw on 127.0.0.1 (conftest.py):
the keys given so come before the process's AWS_* variables, which here
are absent or wrong, and half a key pair is a UsageError naming both
options before anything connects."""

from __future__ import annotations

from pathlib import Path

import pytest

import ferry
from conftest import make_file, tree

MB = 1 << 20


@pytest.fixture
def no_aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No AWS_* variable (but AWS_EC2_METADATA_DISABLED), and a HOME without ~/.aws."""
    import os

    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    # Nor EC2 instance metadata (the AWS chain's last link): no test
    # reaches 169.254.169.254.
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return monkeypatch


@pytest.fixture
def wrong_aws_env(no_aws_env: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """AWS_* keys that the store refuses (and a region of their own)."""
    no_aws_env.setenv("AWS_ACCESS_KEY_ID", "AKIDWRONGWRONG")
    no_aws_env.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-wrong-secret")
    no_aws_env.setenv("AWS_SESSION_TOKEN", "wrong-token")
    return no_aws_env


def test_keys_and_endpoint_as_arguments_with_no_aws_env(versitygw, no_aws_env, work: Path) -> None:
    # Multipart: 11 MiB in 5 MiB parts, 2 at once, with MD5 checksums.
    data = make_file(work / "big.bin", 11 * MB + 5)
    small = make_file(work / "small.txt", 1000, seed=3)
    opts = versitygw.options(
        s3_multipart_threshold="5M", s3_part_size="5M", s3_upload_concurrency=2, s3_checksum="md5"
    )
    up = ferry.copy([work / "big.bin", work / "small.txt"], "s3://bucket/named/", **opts)
    assert up.error is None and up.bytes == len(data) + len(small)
    assert (versitygw.root / "bucket/named/big.bin").read_bytes() == data
    assert (versitygw.root / "bucket/named/small.txt").read_bytes() == small
    down = ferry.copy("s3://bucket/named/", str(work / "back") + "/", recursive=True, **versitygw.options())
    assert down.error is None
    assert tree(work / "back/named") == {"big.bin": data, "small.txt": small}


def test_keys_as_arguments_beat_wrong_aws_keys(versitygw, wrong_aws_env, work: Path) -> None:
    data = make_file(work / "a.bin", 200_000, seed=7)
    # The environment's keys alone are refused by the store...
    with pytest.raises(ferry.AuthError):
        ferry.copy(work / "a.bin", "s3://bucket/env/a.bin", s3_endpoint=versitygw.endpoint,
                   cacert=str(versitygw.cert))
    # ...the ones given as arguments come first, session token and all.
    ferry.copy(work / "a.bin", "s3://bucket/args/a.bin", **versitygw.options())
    assert (versitygw.root / "bucket/args/a.bin").read_bytes() == data
    ferry.copy("s3://bucket/args/a.bin", work / "b.bin", **versitygw.options())
    assert (work / "b.bin").read_bytes() == data


def test_a_transfer_object_and_asyncio_take_them_too(versitygw, no_aws_env, work: Path) -> None:
    import asyncio

    data = make_file(work / "t.bin", 300_000, seed=9)
    report = ferry.Transfer(work / "t.bin", "s3://other/t.bin", **versitygw.options()).result()
    assert report.error is None
    assert (versitygw.root / "other/t.bin").read_bytes() == data
    asyncio.run(ferry.copy_async("s3://other/t.bin", work / "u.bin", **versitygw.options()))
    assert (work / "u.bin").read_bytes() == data


@pytest.mark.parametrize(
    "given",
    [
        {"s3_secret_access_key": "secret"},
        {"s3_access_key_id": "AKID"},
        {"s3_session_token": "token"},
    ],
)
def test_half_a_key_pair_is_a_usage_error_naming_both(versitygw, wrong_aws_env, work: Path, given) -> None:
    make_file(work / "a.bin", 10)
    with pytest.raises(ferry.UsageError) as e:
        ferry.copy(work / "a.bin", "s3://bucket/half/a.bin", s3_endpoint=versitygw.endpoint,
                   cacert=str(versitygw.cert), **given)
    msg = str(e.value)
    assert "s3_access_key_id" in msg and "s3_secret_access_key" in msg, msg
    assert msg.startswith(next(iter(given))), msg
    # Refused before anything was sent: no fallback to the environment.
    assert not (versitygw.root / "bucket/half").exists()


def test_unsigned_requests_asked_for_and_forbidden(versitygw, no_aws_env, work: Path) -> None:
    make_file(work / "a.bin", 10)
    store = {"s3_endpoint": versitygw.endpoint, "cacert": str(versitygw.cert)}
    # No keys anywhere and s3_anonymous=False: refused, nothing sent.
    with pytest.raises(ferry.UsageError) as e:
        ferry.copy(work / "a.bin", "s3://bucket/anon/a.bin", s3_anonymous=False, **store)
    assert "credentials" in str(e.value)
    # The default (as ferry cp): unsigned, which this store refuses.
    with pytest.raises(ferry.AuthError) as e:
        ferry.copy(work / "a.bin", "s3://bucket/anon/a.bin", **store)
    assert "unsigned" in str(e.value) or "no credentials" in str(e.value)
    # s3_no_sign_request: unsigned even with the right keys in the
    # environment.
    no_aws_env.setenv("AWS_ACCESS_KEY_ID", versitygw.options()["s3_access_key_id"])
    no_aws_env.setenv("AWS_SECRET_ACCESS_KEY", versitygw.options()["s3_secret_access_key"])
    ferry.copy(work / "a.bin", "s3://bucket/anon/ok.bin", **store)
    with pytest.raises(ferry.AuthError) as e:
        ferry.copy(work / "a.bin", "s3://bucket/anon/a.bin", s3_no_sign_request=True, **store)
    assert "unsigned" in str(e.value), str(e.value)
    assert (versitygw.root / "bucket/anon/ok.bin").exists()
    assert not (versitygw.root / "bucket/anon/a.bin").exists()


def test_bad_s3_values_say_what_is_wrong() -> None:
    for kw, want in [
        ({"s3_checksum": "sha1"}, "crc32, md5 or none"),
        ({"s3_part_size": "8X"}, "unit"),
        ({"s3_upload_concurrency": 0}, "at least 1"),
        ({"s3_endpoint": "https://127.0.0.1:9/bucket"}, "without a path"),
    ]:
        with pytest.raises(ferry.UsageError) as e:
            ferry.Transfer("/nonexistent", "s3://bucket/x", **kw).start()
        assert want in str(e.value), (kw, str(e.value))


def test_the_s3_names_are_listed() -> None:
    names = ferry.option_names()
    for n in ("s3_endpoint", "s3_region", "s3_profile", "s3_access_key_id", "s3_secret_access_key",
              "s3_session_token", "s3_no_sign_request", "s3_anonymous", "s3_virtual_hosted",
              "s3_part_size", "s3_multipart_threshold", "s3_upload_concurrency", "s3_checksum"):
        assert n in names
