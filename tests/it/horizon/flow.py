"""Horizon's Container Infra panels driven in headless Chromium, as a tenant clicks through them.

Run by tests/it/client_horizon_browser.rs with the Horizon virtualenv's python. Environment:
HORIZON_URL, HORIZON_USER, HORIZON_PASSWORD (a member of exactly one project), CHROMIUM,
CHROMEDRIVER (Debian's: Selenium Manager downloads nothing), ARTIFACTS (a directory).

Prints one line per step with the seconds since the start. Once the cluster the dialog created
is CREATE_COMPLETE it prints `CREATED <uuid>` and waits for a line on stdin (the test checks the
cluster through the API and the management cluster meanwhile). A failing step saves a screenshot
and the page source in ARTIFACTS, prints their paths and exits 1.
"""

import os
import sys
import tempfile
import time
import traceback

from selenium import webdriver
from selenium.common.exceptions import (StaleElementReferenceException, TimeoutException,
                                        WebDriverException)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import Select, WebDriverWait

URL = os.environ['HORIZON_URL']
ARTIFACTS = os.environ['ARTIFACTS']
START = time.monotonic()
# What a page shows once it has loaded; and what the service does meanwhile (creating and
# deleting a cluster are tens of simulated steps; the tables poll every few seconds).
UI_WAIT = 30
WAIT = 180

# True once the document is loaded and Horizon's Angular app has no $http request pending.
SETTLED = '''
  if (document.readyState !== 'complete' || !window.angular) { return false; }
  var injector = angular.element(document.body).injector();
  return !!injector && injector.get('$http').pendingRequests.length === 0;
'''

TEMPLATE = 'browser-k8s'
CLUSTER = 'browser-cluster'


def log(msg):
    print(f'[{time.monotonic() - START:6.1f}s] {msg}', flush=True)


def browser(profile):
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ['CHROMIUM']
    # The flags that work on these machines' closed network (no background connections).
    for flag in ('--headless', '--no-sandbox', '--disable-gpu', '--disable-quic',
                 '--no-first-run', '--disable-background-networking',
                 '--disable-component-update', '--disable-sync',
                 '--disable-dev-shm-usage', '--window-size=1400,1000',
                 f'--user-data-dir={profile}'):
        options.add_argument(flag)
    options.set_capability('goog:loggingPrefs', {'browser': 'ALL'})
    service = Service(executable_path=os.environ['CHROMEDRIVER'])
    return webdriver.Chrome(service=service, options=options)


class Flow:
    def __init__(self, driver):
        self.d = driver
        self.wait = WebDriverWait(driver, UI_WAIT, poll_frequency=0.2)
        self.uuid = None

    # --- finding things -------------------------------------------------------------------

    def visible(self, css):
        return self.wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, css)),
                               f'{css} visible')

    def clickable(self, xpath):
        return self.wait.until(ec.element_to_be_clickable((By.XPATH, xpath)),
                               f'{xpath} clickable')

    def click(self, xpath):
        for _ in range(5):
            try:
                self.clickable(xpath).click()
                return
            except StaleElementReferenceException:
                time.sleep(0.2)
        self.clickable(xpath).click()

    def button(self, text, scope='//'):
        """A button or link whose text is `text` (Horizon puts icons and spaces around it)."""
        return (f"{scope}*[self::button or self::a][normalize-space(.)='{text}']")

    def modal(self):
        return self.visible('.modal-dialog')

    def field(self, name):
        return self.visible(f".modal-dialog [name='{name}']")

    def type_in(self, name, text):
        el = self.field(name)
        el.clear()
        el.send_keys(text)

    def choose(self, name, label):
        """Picks the option shown as `label` once the dialog has loaded it."""
        self.wait.until(lambda d: any(o.text.strip() == label
                                      for o in Select(self.field(name)).options),
                        f'option {label!r} of {name}')
        Select(self.field(name)).select_by_visible_text(label)

    def tab(self, title):
        self.click(f"//div[contains(@class,'modal-dialog')]//ul[contains(@class,'nav')]"
                   f"//a[normalize-space(.)='{title}']")

    def submit(self, text):
        self.click(self.button(text, "//div[contains(@class,'modal-footer')]//"))
        self.wait.until(ec.invisibility_of_element_located((By.CSS_SELECTOR, '.modal-dialog')),
                        'the dialog to close')
        # What the dialog sent has been answered; Horizon shows a failure as a red toast.
        self.settled()
        errors = [e.text for e in self.d.find_elements(By.CSS_SELECTOR, '.alert-danger')
                  if e.is_displayed()]
        if errors:
            raise AssertionError(f'Horizon says: {errors}')

    def row(self, name):
        """The table row of the resource named `name` (its name is a link to its page)."""
        return f"//table//tr[.//a[normalize-space(.)='{name}']]"

    def wait_text(self, xpath, text):
        self.wait.until(self.shows(xpath, text), f'{text!r} in {xpath}')

    def gone(self, xpath):
        self.reloading(lambda d: not d.find_elements(By.XPATH, xpath), f'{xpath} gone')

    def reloading(self, seen, what):
        """Waits for `seen` as a user would: magnum-ui's tables and detail pages do not poll,
        so the page is reloaded every few seconds. `seen` is judged once the page has its data
        (a table without its rows yet would look like one whose row is gone)."""
        end = time.monotonic() + WAIT
        while True:
            self.settled()
            try:
                WebDriverWait(self.d, 2, poll_frequency=0.2).until(seen)
                return
            except TimeoutException:
                if time.monotonic() > end:
                    raise TimeoutException(f'{what} (reloading for {WAIT} s)')
                self.d.refresh()

    def settled(self):
        """The page has loaded and Angular has no request to Horizon's REST API outstanding."""
        self.wait.until(lambda d: d.execute_script(SETTLED), 'the page to load its data')

    def shows(self, xpath, text):
        def seen(d):
            try:
                return any(text in e.text for e in d.find_elements(By.XPATH, xpath))
            except StaleElementReferenceException:
                return False
        return seen

    # --- the steps ------------------------------------------------------------------------

    def login(self):
        self.d.get(f'{URL}/auth/login/?next=/project/cluster_templates/')
        self.visible('#id_username').send_keys(os.environ['HORIZON_USER'])
        self.d.find_element(By.ID, 'id_password').send_keys(os.environ['HORIZON_PASSWORD'])
        self.d.find_element(By.ID, 'loginBtn').click()
        self.wait.until(ec.url_contains('/project/cluster_templates'),
                        'the templates panel after login')

    def create_template(self):
        self.click(self.button('Create Cluster Template'))
        self.modal()
        # Info: name and engine.
        self.type_in('name', TEMPLATE)
        self.choose('coe', 'Kubernetes')
        self.click(self.button('Next', "//div[contains(@class,'modal-footer')]//"))
        # Node Spec: the image.
        self.choose('image_id', 'ubuntu-2204-kube-v1.30.4')
        # Flavors the cluster dialog offers (magnum-ui's minimum: 2 GiB and 2 vCPUs).
        self.choose('flavor_id', 'm1.medium')
        self.choose('master_flavor_id', 'm1.large')
        self.click(self.button('Next', "//div[contains(@class,'modal-footer')]//"))
        # Network: the external network.
        self.choose('external_network_id', 'public')
        self.click(self.button('Next', "//div[contains(@class,'modal-footer')]//"))
        # Labels: the Kubernetes version the image carries.
        self.type_in('labels', 'kube_tag=v1.30.4')
        self.submit('Submit')
        self.wait_text(self.row(TEMPLATE), TEMPLATE)

    def create_cluster(self):
        self.d.get(f'{URL}/project/clusters/')
        self.click(self.button('Create Cluster'))
        self.modal()
        # Only the required fields; every other field keeps the dialog's default.
        self.type_in('name', CLUSTER)
        self.choose('cluster_template_id', TEMPLATE)
        self.choose('availability_zone', 'nova')
        self.choose('keypair', 'default')
        # Size: the template has no worker count, so the dialog has none either (required);
        # the control plane count follows the template (one without its load balancer).
        self.tab('Size')
        self.type_in('node_count', '1')
        self.submit('Submit')
        self.wait_text(self.row(CLUSTER), CLUSTER)

    def cluster_complete(self):
        self.reloading(self.shows(self.row(CLUSTER), 'CREATE_COMPLETE'), 'CREATE_COMPLETE')

    def detail_page(self):
        self.click(f"{self.row(CLUSTER)}//a[normalize-space(.)='{CLUSTER}']")
        self.wait.until(ec.url_contains('/ngdetails/OS::Magnum::Cluster/'), 'the detail page')
        self.wait_text("//span[contains(@class,'h1')]", CLUSTER)
        self.wait_text(self.detail('Node Count'), '1')
        self.uuid = self.d.current_url.rstrip('/').rsplit('/', 1)[-1]

    def checked_through_the_api(self):
        """Hands the cluster to the test, which checks it through the API and the management
        cluster, and waits for its go-ahead."""
        print(f'CREATED {self.uuid}', flush=True)
        if sys.stdin.readline().strip() != 'go':
            raise AssertionError('the test did not say go')

    def detail(self, term):
        """The value of `term` on a detail page (a definition list)."""
        return f"//dt[normalize-space(.)='{term}']/following-sibling::dd[1]"

    def resize(self):
        # The page's actions: the first is a button, the others in the dropdown beside it.
        self.click("//button[contains(@class,'split-caret')]")
        self.click("//a[@role='menuitem'][normalize-space(.)='Resize Cluster']")
        self.modal()
        self.type_in('node_count', '2')
        self.submit('Submit')
        self.reloading(self.shows(self.detail('Node Count'), '2'), 'Node Count 2')

    def update_complete(self):
        self.d.get(f'{URL}/project/clusters/')
        self.reloading(self.shows(self.row(CLUSTER), 'UPDATE_COMPLETE'), 'UPDATE_COMPLETE')

    def delete_cluster(self):
        self.delete('clusters', CLUSTER, 'Delete Cluster')

    def delete_template(self):
        self.delete('cluster_templates', TEMPLATE, 'Delete Cluster Template')

    def delete(self, panel, name, action):
        """The row's delete action, confirmed; then reloads until the table no longer lists it
        (the table drops the row at once, before the service has deleted anything)."""
        self.d.get(f'{URL}/project/{panel}/')
        self.wait_text(self.row(name), name)
        self.click(f"{self.row(name)}//button[contains(@class,'dropdown-toggle')]")
        self.click(f"{self.row(name)}//*[normalize-space(.)='{action}']")
        self.submit(action)
        self.d.refresh()
        self.gone(self.row(name))


def keep(driver, step):
    """The screenshot and page source of a failing step; their paths."""
    paths = []
    try:
        png = os.path.join(ARTIFACTS, f'{step}.png')
        driver.save_screenshot(png)
        paths.append(png)
        html = os.path.join(ARTIFACTS, f'{step}.html')
        with open(html, 'w', encoding='utf-8') as f:
            f.write(driver.page_source)
        paths.append(html)
        logs = os.path.join(ARTIFACTS, f'{step}.console.txt')
        with open(logs, 'w', encoding='utf-8') as f:
            for entry in driver.get_log('browser'):
                f.write(f"{entry['level']} {entry['message']}\n")
        paths.append(logs)
    except WebDriverException as e:
        log(f'could not save the page: {e}')
    return paths


def main():
    with tempfile.TemporaryDirectory(prefix='horizon-chromium-') as profile:
        return run(browser(profile))


def run(driver):
    log('chromium started')
    flow = Flow(driver)
    step = 'start'
    try:
        for step, action in [
            ('login', flow.login),
            ('template_wizard', flow.create_template),
            ('cluster_dialog', flow.create_cluster),
            ('create_complete_in_table', flow.cluster_complete),
            ('detail_page', flow.detail_page),
            ('checked_through_the_api', flow.checked_through_the_api),
            ('resize_dialog', flow.resize),
            ('update_complete_in_table', flow.update_complete),
            ('delete_cluster', flow.delete_cluster),
            ('delete_template', flow.delete_template),
        ]:
            action()
            log(f'{step}: ok')
    except Exception:  # noqa: BLE001 — any failure of a step is reported with its page
        log(f'{step}: FAILED at {driver.current_url}')
        traceback.print_exc(file=sys.stdout)
        for path in keep(driver, step):
            log(f'kept {path}')
        return 1
    finally:
        driver.quit()
    return 0


if __name__ == '__main__':
    sys.exit(main())
