"""factory_boy factories for the knowledge models."""

import factory
from django.contrib.auth import get_user_model

from core.models import Membership, Tenant
from knowledge.models import Source


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant

    slug = factory.Sequence(lambda n: f"tenant-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.title())
    embedder = "local"


class SourceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Source

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda n: f"source-{n}")


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.PostGenerationMethodCall("set_password", "pass-word-123")

    @factory.post_generation
    def saved(obj, create, extracted, **kwargs):
        if create:
            obj.save()


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    tenant = factory.SubFactory(TenantFactory)
    role = Membership.Role.MEMBER
