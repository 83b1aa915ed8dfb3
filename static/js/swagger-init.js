// Starts Swagger UI on /docs. It lives in a file of its own because the server's
// Content-Security-Policy runs scripts from this server only, never inline ones.
/* global SwaggerUIBundle */
window.ui = SwaggerUIBundle({
  url: document.body.dataset.openapiUrl,
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  validatorUrl: null, // the default would load a badge from another site
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
