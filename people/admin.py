"""Admin of member profiles, limited to the tenant admin's own tenant (``core.admin``)."""

from django.contrib import admin

from core.admin import TenantScopedAdmin
from people.models import Profile


@admin.register(Profile)
class ProfileAdmin(TenantScopedAdmin):
    list_display = ("membership", "title", "team", "expertise", "language", "updated_at")
    list_filter = ("expertise", "language")
    search_fields = ("membership__user__username", "title", "team")
    list_select_related = ("membership__user", "membership__tenant")
    filter_horizontal = ("preferred_sources", "muted_sources")
    readonly_fields = ("membership", "updated_at")

    def has_add_permission(self, request):
        return False  # a profile is made with its member's first visit
