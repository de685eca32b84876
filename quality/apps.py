from django.apps import AppConfig


class QualityConfig(AppConfig):
    name = "quality"
    verbose_name = "Quality"
