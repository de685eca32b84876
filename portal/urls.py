app_name = "portal"
urlpatterns = []
