from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from core.secrets import secrets_rotate

ROTATION = (
    "To rotate the key: put a new key first in KB_SECRET_KEYS, keeping the old ones after it, on every "
    "process (web and workers); run `manage.py rotatekeys`; once it reports nothing unreadable, drop the old keys."
)


class Command(BaseCommand):
    help = (
        "Re-encrypt every stored secret (connector tokens, SSO client secrets) with the first key of "
        f"KB_SECRET_KEYS, and report those no key decrypts. {ROTATION}"
    )

    def handle(self, *args, **options):
        key = "the first key of KB_SECRET_KEYS" if settings.KB_SECRET_KEYS else "the key derived from SECRET_KEY"
        self.stdout.write(f"Re-encrypting stored secrets with {key}.")
        results = secrets_rotate()
        for result in results:
            line = f"{result.label}: {result.rewritten} rewritten, {len(result.unreadable)} could not be decrypted"
            if result.unreadable:
                line += " (primary keys " + ", ".join(str(pk) for pk in result.unreadable) + ")"
            self.stdout.write(line)
        unreadable = sum(len(result.unreadable) for result in results)
        if unreadable:
            raise CommandError(
                f"{unreadable} stored secret(s) could not be decrypted with any key of KB_SECRET_KEYS and were left "
                "as they are: put the key that encrypted them back in KB_SECRET_KEYS (after the first) and run "
                "rotatekeys again, or set those secrets anew. Do not drop any old key until then."
            )
        self.stdout.write(self.style.SUCCESS(f"Every stored secret is encrypted with {key}."))
        self.stdout.write(ROTATION)
