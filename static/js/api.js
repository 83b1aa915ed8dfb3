// The JSON API client: every failure becomes an ApiError with a message a person can read.

export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.name = "ApiError";
    this.status = status;
  }
}

/** FastAPI's `detail`: a string, or a list of {loc, msg} for validation errors. */
export function describeDetail(detail) {
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    return detail
      .map((item) => {
        if (typeof item === "string") return item;
        const loc = (item.loc || []).filter((part) => part !== "body").join(".");
        return loc ? `${loc}: ${item.msg}` : String(item.msg);
      })
      .join("; ");
  }
  if (detail && typeof detail === "object") return JSON.stringify(detail);
  return "";
}

export async function request(method, path, body) {
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: body === undefined ? {} : { "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    throw new ApiError(`Could not reach the server (${err.message}).`, 0);
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const detail = describeDetail(data && data.detail) || text.slice(0, 300) || response.statusText;
    throw new ApiError(`Error ${response.status}: ${detail}`, response.status);
  }
  if (data === null) throw new ApiError("The server sent an empty or non-JSON answer.", response.status);
  return data;
}

export const getJSON = (path) => request("GET", path);
export const postJSON = (path, body) => request("POST", path, body);
