"""The password hasher of the test accounts."""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class FastPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """PBKDF2-SHA256 at one iteration instead of Django's million (0.2 s a password on 2 cores),
    for the test run only (``tests/conftest.py``), where thousands of accounts are made and signed
    in. A hash it writes names its algorithm and iteration count (``pbkdf2_sha256$1$...``), so a
    server, worker or command started by a test on the real settings still verifies it."""

    iterations = 1
