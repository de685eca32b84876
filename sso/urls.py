"""Single sign-on URLs: start a sign-in at a provider, and the callback the provider redirects to
(register ``https://<host>/sso/callback/`` at the installation's provider and
``https://<host>/sso/tenant/<slug>/callback/`` at a tenant's)."""

from django.urls import path

from sso import views

app_name = "sso"
urlpatterns = [
    path("login/", views.signin_start, name="login"),
    path("callback/", views.signin_callback, name="callback"),
    path("tenant/<slug:slug>/login/", views.signin_start, name="tenant-login"),
    path("tenant/<slug:slug>/callback/", views.signin_callback, name="tenant-callback"),
]
