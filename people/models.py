"""People: what a member tells the knowledge base about themselves, to shape their answers.

A ``Profile`` belongs to a membership (a user in a tenant), since its preferred and muted
sources are that tenant's. Personalization (seed ``magic-of-rag-retrieval.txt``, "Response
Personalization") reads it; ``people.services.profile_update`` writes it.
"""

from __future__ import annotations

from django.conf import global_settings
from django.db import models

from core.models import Membership
from core.tenancy import TenantScopedQuerySet
from knowledge.models import Source


class ProfileQuerySet(TenantScopedQuerySet):
    tenant_path = "membership__tenant"


class Profile(models.Model):
    """A member's role/title, team, expertise, language, preferred and muted sources and "about me"."""

    class Expertise(models.TextChoices):
        BEGINNER = "beginner", "Beginner"
        INTERMEDIATE = "intermediate", "Intermediate"
        EXPERT = "expert", "Expert"

    membership = models.OneToOneField(Membership, on_delete=models.CASCADE, related_name="profile")
    title = models.CharField("role or title", max_length=200, blank=True)
    team = models.CharField(max_length=200, blank=True)
    expertise = models.CharField(max_length=20, choices=Expertise.choices, blank=True)
    language = models.CharField("preferred language", max_length=15, choices=global_settings.LANGUAGES, blank=True)
    preferred_sources = models.ManyToManyField(Source, blank=True, related_name="+")
    muted_sources = models.ManyToManyField(Source, blank=True, related_name="+")
    about = models.TextField("about me", max_length=2000, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ProfileQuerySet.as_manager()

    def __str__(self) -> str:
        return f"Profile of {self.membership}"
