// Starts Swagger UI on the page of /docs with the settings Dynamo 1.6.1's /docs uses: this
// server's API document, deep links, and the standalone layout (its top bar included).
window.onload = function () {
  window.ui = SwaggerUIBundle({
    dom_id: "#swagger-ui",
    url: "/openapi.json",
    deepLinking: true,
    layout: "StandaloneLayout",
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
    plugins: [SwaggerUIBundle.plugins.DownloadUrl],
  });
};
