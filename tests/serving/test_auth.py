import pytest

from serving.auth import is_loopback, read_api_key
from serving.errors import AuthSetupError


def test_key_file_with_mode_0600_is_read(tmp_path):
    path = tmp_path / "key"
    path.write_text("s3cret\n")
    path.chmod(0o600)
    assert read_api_key(path) == "s3cret"
    path.chmod(0o400)
    assert read_api_key(path) == "s3cret"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o700, 0o666])
def test_key_file_readable_by_others_is_refused(tmp_path, mode):
    path = tmp_path / "key"
    path.write_text("s3cret")
    path.chmod(mode)
    with pytest.raises(AuthSetupError, match="chmod 600"):
        read_api_key(path)


def test_missing_or_empty_key_file_is_refused(tmp_path):
    with pytest.raises(AuthSetupError, match="cannot read"):
        read_api_key(tmp_path / "absent")
    path = tmp_path / "key"
    path.write_text("  \n")
    path.chmod(0o600)
    with pytest.raises(AuthSetupError, match="one key"):
        read_api_key(path)


def test_loopback_addresses():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.2")
