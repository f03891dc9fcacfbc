/* personaplex-server: the ICE agent of a WebRTC call (server-ice.h). */
#include "server-ice.h"

#include <gio/gio.h>

/* The libnice agent never asks a router to map ports (UPnP): the server answers on its own address only. */
static void
disable_upnp (GObject *ice)
{
  GObject *agent = NULL;
  if (g_object_class_find_property (G_OBJECT_GET_CLASS (ice), "agent"))
    g_object_get (ice, "agent", &agent, NULL);
  if (agent && g_object_class_find_property (G_OBJECT_GET_CLASS (agent), "upnp"))
    g_object_set (agent, "upnp", FALSE, NULL);
  else
    g_printerr ("personaplex-server: warning: could not turn UPnP off on the ICE agent\n");
  g_clear_object (&agent);
}

/* Gathers only on the listening address when it is a specific one (loopback by default), so that
 * ICE never offers or probes other interfaces; never UPnP. */
void
ppx_server_ice_configure (GstElement *webrtc, const char *address)
{
  GObject *ice = NULL;
  g_object_get (webrtc, "ice-agent", &ice, NULL);
  if (!ice)
    return;
  disable_upnp (ice);
  g_autoptr (GInetAddress) inet = g_inet_address_new_from_string (address);
  if (!inet || g_inet_address_get_is_any (inet)) {
    g_object_unref (ice);
    return;
  }
  gboolean added = FALSE;
  if (g_signal_lookup ("add-local-ip-address", G_OBJECT_TYPE (ice)))
    g_signal_emit_by_name (ice, "add-local-ip-address", address, &added);
  if (g_object_class_find_property (G_OBJECT_GET_CLASS (ice), "ice-tcp"))
    g_object_set (ice, "ice-tcp", FALSE, NULL);
  if (!added)
    g_printerr ("personaplex-server: warning: ICE could not be restricted to %s\n", address);
  g_object_unref (ice);
}

