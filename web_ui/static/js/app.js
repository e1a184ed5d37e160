// Entry module of every dashboard page: registers the stores and page components
// with Alpine, then starts it.
import Alpine from "../vendor/alpine-csp.esm.min.js";
import { install as installAuth } from "./auth.js";
import { analyticsCard, sparkStats } from "./analytics.js";
import { install as installConn } from "./conn.js";
import { install as installTheme } from "./themes.js";
import { createForm, listView } from "./lists.js";
import { overviewPage } from "./overview.js";
import { peekPanel, producePanel } from "./messages.js";
import { policiesCard } from "./policies.js";
import { schemaCard } from "./schema.js";
import { searchPage } from "./search.js";
import { sqlPage } from "./sql.js";
import { subscriptionsPage } from "./subscriptions.js";
import { tailPanel } from "./tail.js";
import { topicPage } from "./topic.js";

installTheme(Alpine);
installConn(Alpine);
installAuth(Alpine);
Alpine.store("topic", { subNames: [], partitions: 0 });
Alpine.data("overviewPage", overviewPage);
Alpine.data("listView", listView);
Alpine.data("createForm", createForm);
Alpine.data("policiesCard", policiesCard);
Alpine.data("topicPage", topicPage);
Alpine.data("producePanel", producePanel);
Alpine.data("peekPanel", peekPanel);
Alpine.data("tailPanel", tailPanel);
Alpine.data("schemaCard", schemaCard);
Alpine.data("sparkStats", sparkStats);
Alpine.data("analyticsCard", analyticsCard);
Alpine.data("sqlPage", sqlPage);
Alpine.data("subscriptionsPage", subscriptionsPage);
Alpine.data("searchPage", searchPage);
window.Alpine = Alpine;
Alpine.start();
