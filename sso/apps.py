from django.apps import AppConfig


class SsoConfig(AppConfig):
    name = "sso"
    verbose_name = "Single sign-on"

    def ready(self) -> None:
        """Refuse to start with a half-set or unusable installation-wide provider
        (``KB_OIDC_*``): ``ImproperlyConfigured`` naming the variable, in every process."""
        from sso.providers import installation_settings_check

        installation_settings_check()
