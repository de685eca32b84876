"""Routes of the quality gate's API, mounted at /api/v1/settings/retrieval/ by ``config.api_urls``."""

from django.urls import path

from quality.apis import (
    RetrievalSettingsChangeDetailApi,
    RetrievalSettingsChangeOverrideApi,
    RetrievalSettingsProposeApi,
)

urlpatterns = [
    path("", RetrievalSettingsProposeApi.as_view(), name="retrieval-settings"),
    path("changes/<int:change_id>/", RetrievalSettingsChangeDetailApi.as_view(), name="retrieval-settings-change"),
    path(
        "changes/<int:change_id>/override/",
        RetrievalSettingsChangeOverrideApi.as_view(),
        name="retrieval-settings-change-override",
    ),
]
